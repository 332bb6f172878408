#!/usr/bin/env bash
# Installs what the engine needs on a fresh Debian machine: the Fashion-MNIST data
# (Debian's dataset-fashion-mnist, and the same images as a CSV table and as folders of
# PNG files in data/) and, with --test, Mesa's lavapipe (Vulkan on the CPU,
# for the wgpu backend's tests) and the Python packages the tests use to check our files
# against real readers and writers (TensorBoard, safetensors, tfrecord, moto's S3 server)
# in ./.venv, and rustfmt and clippy, which the test command runs first. Idempotent: re-running does only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=false
for arg in "$@"; do
  case "$arg" in
    --test) want_tests=true ;;
    *) echo "usage: scripts/setup.sh [--test]" >&2; exit 2 ;;
  esac
done

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "setup: installing dataset-fashion-mnist" >&2
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq dataset-fashion-mnist >/dev/null
fi

if [ ! -f data/fashion_mnist_table/test.csv ]; then
  # The same images as a CSV table with string labels, for specs/fashion_mnist_table.ron.
  echo "setup: writing data/fashion_mnist_table/{train,test}.csv" >&2
  python3 scripts/make_fashion_table.py
fi

if [ ! -d data/fashion_mnist_png/test ]; then
  # The same images as folders of PNG files, one per class, for specs/fashion_mnist_png.ron.
  echo "setup: writing data/fashion_mnist_png/{train,test}/<class>/*.png" >&2
  python3 scripts/make_fashion_pngs.py
fi

if $want_tests && [ ! -f /usr/share/vulkan/icd.d/lvp_icd.x86_64.json ]; then
  # Mesa's lavapipe, a Vulkan driver on the CPU: the wgpu backend's tests run on it.
  echo "setup: installing mesa-vulkan-drivers and libvulkan1" >&2
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
fi

if $want_tests && ! { cargo fmt --version && cargo clippy --version; } >/dev/null 2>&1; then
  # The test command checks formatting and lints first.
  echo "setup: adding the rustfmt and clippy components" >&2
  rustup component add rustfmt clippy
fi

if $want_tests; then
  if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv" >&2
    python3 -m venv .venv
  fi
  # A stamp of the requirements file, so an unchanged environment is not re-resolved.
  stamp=.venv/.requirements.sha256
  want=$(sha256sum scripts/test-requirements.txt | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "setup: installing Python test packages" >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check -r scripts/test-requirements.txt
    echo "$want" > "$stamp"
  fi
fi
