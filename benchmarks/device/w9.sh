#!/usr/bin/env bash
# W9 on one machine with a GPU, in one go: install aioloader from this working tree, write
# the JPEGs to /dev/shm, then run W9 (accelerator feed), W9C (the decode alone on the CPU)
# and W9D (the demo against threads) as one run; w9.md, w9.json, w9.png and w9.log go to
# $OUT (default benchmarks/results/device).
#
# Time on 16 cores and an H200, estimated (one kept round, the default): setup (install, the
# 4,096 JPEGs, the kernels' first compile) about 1 minute; W9 about 1-2 minutes (7 rows of
# 38 steps of 256 images, at 1,300-4,700 images/s, in a warm-up and a kept round); W9D a few
# seconds. W9C times at least 3 s of work per row (w9_cpu.steps: 18, 71, 141 and 264 timed
# batches of 256 at 0, 4, 8 and 15 workers): about 1 minute (2 rounds of ~30 s) where the
# threads scale as the chain allows (~1,000 images/s per core); where they stop at 4 cores
# as in issue 34's table (367, 1,077, 1,605, 1,362 images/s; processes 5,090, torch 4,182)
# a round takes 140 s, 280 s with the warm-up round. So about 4 minutes expected and about
# 8 at worst (~480 s), inside W9_TIMEOUT's 540 s and the device call's 600 s;
# W9_ROUNDS=2 fits only where the threads scale.
#
# The GPU image has torch, torchvision, numpy, numba, pillow, anyio, uvloop and aiofiles,
# but not simplejpeg or sniffio (aioloader's base install needs sniffio; W9's chain needs
# simplejpeg; obstore is needed by object-store sources only, not here). On a machine with
# pip's index, fetch their wheels for Python 3.12 on x86-64 Linux into .whl/ (ignored by
# git: `echo /.whl/ >> .git/info/exclude`), once:
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     --platform manylinux1_x86_64 -d .whl simplejpeg==1.9.0 sniffio==1.3.1
#
# and check that they install for that Python (here, whatever Python runs pip):
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/w9site \
#     --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
#     --only-binary=:all: .whl/*.whl
#
# Then run this script there with .whl carried, e.g. the device tool's
# run(command="bash benchmarks/device/w9.sh", carry=[".whl"], timeout_s=600).
# W9_ROUNDS: kept rounds after the warm-up round (default 1); W9_TIMEOUT: seconds the run
# may take (default 540), so that its log comes back inside a 10-minute call. For the
# CPU form where aioloader is installed already (no GPU: a tiny model, fewer images):
#   PYTHON=.venv/bin/python W9_INSTALL=0 W9_DEVICE=cpu OUT=/tmp/w9 bash benchmarks/device/w9.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-benchmarks/results/device}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PYTHON="${PYTHON:-python3}"

main() {
    echo "== machine"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    echo "cores: $(nproc)"
    "$PYTHON" --version
    if [ "${W9_INSTALL:-1}" != 0 ]; then install || return 1; fi
    "$PYTHON" -c 'import aioloader, simplejpeg, sniffio, torch
print("aioloader", aioloader.__file__, "torch", torch.__version__,
      "cuda", torch.cuda.is_available())' || return 1
    local folder=/dev/shm/aioloader-w9 free
    free=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $4}')
    if [ "${free:-0}" -lt 2097152 ]; then  # under 2 GiB free: tmpfs too small
        folder=/tmp/aioloader-w9
        echo "/dev/shm has ${free:-0} KiB free: the JPEGs go to $folder"
    fi
    echo "== run"
    timeout "${W9_TIMEOUT:-540}" "$PYTHON" benchmarks/run.py --workloads W9,W9C,W9D --name w9 \
        --rounds "${W9_ROUNDS:-1}" --w9-device "${W9_DEVICE:-cuda}" --w9-folder "$folder" \
        --output "$OUT"
}

install() {
    echo "== install"
    if compgen -G ".whl/*.whl" >/dev/null; then
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/w9site .whl/*.whl || return 1
        export PYTHONPATH="/tmp/w9site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    "$PYTHON" -m pip install -q --no-deps --no-build-isolation -e . \
        || echo "editable install failed: aioloader is read from this tree (PYTHONPATH)"
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # worker processes find it too
    "$PYTHON" -c 'import torchvision' || return 1  # ResNet-50
}

main 2>&1 | tee "$OUT/w9.log"
