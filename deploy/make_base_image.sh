#!/bin/sh
# A local stand-in for python:3.11-slim where Docker Hub cannot be reached (docs/serve.md):
# a minimal Debian bookworm root file system from a Debian mirror (debootstrap), with
# Python 3.11 (with its C headers, as python:3.11-slim has: pycosat compiles from source) and
# a virtual environment whose `python` and `pip` are first on PATH, imported
# as a Docker image. Then build orchenv's image on it:
#
#   sudo [EXTRA_CA_CERT=proxy-ca.crt] deploy/make_base_image.sh orchenv-base:bookworm-py311 [MIRROR]
#   docker build -f deploy/Dockerfile --build-arg BASE=orchenv-base:bookworm-py311 -t orchenv-mathroute .
#
# Needs root, debootstrap and a running Docker daemon. Written by hand: Docker's own
# `contrib/mkimage` scripts are not shipped with Debian's docker.io package.
set -eu
TAG=${1:-orchenv-base:bookworm-py311}
MIRROR=${2:-http://deb.debian.org/debian}
ROOTFS=$(mktemp -d /tmp/orchenv-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
trap 'exit 1' INT TERM
debootstrap --variant=minbase --include=python3,python3-venv,python3-dev,ca-certificates \
    bookworm "$ROOTFS" "$MIRROR"
chroot "$ROOTFS" python3 -m venv /opt/python
if [ -n "${EXTRA_CA_CERT:-}" ]; then  # a TLS-intercepting proxy's CA, for pip in the build
    cp "$EXTRA_CA_CERT" "$ROOTFS/usr/local/share/ca-certificates/extra-ca.crt"
    chroot "$ROOTFS" update-ca-certificates
fi
chroot "$ROOTFS" apt-get clean
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*
tar -C "$ROOTFS" -c . | docker import \
    --change 'ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["python3"]' \
    - "$TAG"
echo "built $TAG"
