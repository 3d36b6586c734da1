#!/usr/bin/env bash
# Debian's bubblewrap binary and the libraries it links (libselinux, libcap, libpcre2-8), unpacked
# into .gl/bwrap (ignored; the device tool carries it) for a machine that has no bwrap and where
# nothing can be installed (the GPU machine). Under 1.5 MB. Needs apt-get (downloads only).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
(cd "$tmp" && apt-get download bubblewrap libselinux1 libcap2 libpcre2-8-0 >/dev/null 2>&1 \
  || { apt-get update -qq && apt-get download bubblewrap libselinux1 libcap2 libpcre2-8-0; })
for d in "$tmp"/*.deb; do dpkg-deb -x "$d" "$tmp/root"; done
mkdir -p .gl/bwrap/bin .gl/bwrap/lib
cp "$tmp/root/usr/bin/bwrap" .gl/bwrap/bin/
# Real files, not symlinks: the device tool does not carry links.
find "$tmp/root" -name '*.so*' \( -type f -o -type l \) -exec cp -L {} .gl/bwrap/lib/ \;
rm -rf "$tmp"
ls -l .gl/bwrap/bin .gl/bwrap/lib
