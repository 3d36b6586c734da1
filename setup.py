"""Build hook only (metadata lives in pyproject.toml): the wheel also carries the top-level
files the bot reads at run time, which sit outside the package in the repository."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = ("model_registry.yaml", "prompts")  # read through enablebot.shipped.shipped()


class BuildPyWithShipped(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's own files
        dest = Path(self.build_lib) / "enablebot" / "_shipped"
        dest.mkdir(parents=True, exist_ok=True)
        for name in SHIPPED:
            src = ROOT / name
            if src.is_dir():
                shutil.copytree(src, dest / name, dirs_exist_ok=True)
            else:
                shutil.copy2(src, dest / name)


setup(cmdclass={"build_py": BuildPyWithShipped})
