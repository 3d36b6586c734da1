"""enablebot: finds, logs and fixes torch.compile graph breaks across Hugging Face architectures."""

__version__ = "0.1.0"
