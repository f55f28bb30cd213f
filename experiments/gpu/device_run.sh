#!/bin/bash
# Run trained_gate_table.py on a device machine that has torch and transformers but no
# package registry, across calls of at most 10 minutes, without splitting the work:
#
#   here:    experiments/gpu/device_run.sh prepare ROOT   # ROOT: the checkout the device
#            tool sends; fills ROOT/.whl (add /.whl/ to .git/info/exclude, carry .whl)
#   call 1:  bash .whl/device_run.sh start 555   # installs, starts the run, waits 555 s
#   call 2:  bash .whl/device_run.sh wait 580    # at once (the machine is kept 30 s idle)
#
# `start 555 depth` runs trained_depth.py instead (the depth rule on trained models at
# 2-28 layers; ~5.5 min of training, its json saved after every depth), the same way.
#
# `start` runs the experiment in its own session (setsid), so it goes on between calls;
# each call copies the log and the partial table (saved after every side and every
# judged row) to $OUT. Training (150 s) + 17 sides (~25 s each) + judging is ~12 min.
set -u
mode=${1:?prepare ROOT | start [seconds] [gate|depth] | wait [seconds]}
case $mode in
prepare)
    root=${2:?ROOT}; here=$(cd "$(dirname "$0")/../.." && pwd)
    rm -rf "$root/.whl/gpu" "$root/.whl/operator"
    mkdir -p "$root/.whl/gpu" "$root/.whl/operator"
    /work/main/.venv/bin/pip download -q --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        pydantic pydantic-core typing-extensions annotated-types typing-inspection \
        -d "$root/.whl" || exit 3
    cp "$here"/experiments/gpu/*.py "$here"/experiments/gpu/device_run.sh "$root/.whl/gpu/"
    cp "$here/experiments/gpu/device_run.sh" "$root/.whl/"
    (cd "$here/operator" && tar cf - --exclude=__pycache__ infergate) | tar xf - -C "$root/.whl/operator"
    git -C "$here" log -1 --format='from %h %s' > "$root/.whl/SOURCE"
    du -sh "$root/.whl"
    ;;
start)
    root=$(pwd); cat .whl/SOURCE; python3 --version; nvidia-smi -L
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 3
    # The code runs from a copy: the next call's sync may rewrite the carried folder.
    rm -rf /tmp/tgtcode /tmp/tgt && mkdir -p /tmp/tgtcode /tmp/tgt
    cp -r .whl/gpu .whl/operator /tmp/tgtcode/
    case ${3:-gate} in
    gate) run="gpu/trained_gate_table.py --work /tmp/tgt --out /tmp/tgt/table.json"
        run+=" --train-seconds 150 --record-until 100000" ;;
    depth) run="gpu/trained_depth.py --work /tmp/tgt --out /tmp/tgt/table.json" ;;
    *) echo "unknown experiment ${3}" >&2; exit 2 ;;
    esac
    (cd /tmp/tgtcode && setsid nohup bash -c "PYTHONPATH=/tmp/site:/tmp/tgtcode/operator PYTHONUNBUFFERED=1 \
        python3 $run; echo \$? > /tmp/tgt/rc" \
        > /tmp/tgt/log 2>&1 < /dev/null &)
    exec bash "$root/.whl/device_run.sh" wait "${2:-555}"
    ;;
wait)
    limit=${2:-580}; began=$SECONDS
    copy() {
        cp /tmp/tgt/log "${OUT:-/tmp}/log.txt" 2>/dev/null
        cp /tmp/tgt/table.json "${OUT:-/tmp}/table.json" 2>/dev/null
    }
    while [ ! -e /tmp/tgt/rc ] && ((SECONDS - began < limit)); do sleep 10; copy; done
    copy
    if [ -e /tmp/tgt/rc ]; then echo "FINISHED rc=$(cat /tmp/tgt/rc)"; else echo "STILL RUNNING"; fi
    tail -c 8000 /tmp/tgt/log
    ;;
*) echo "unknown mode $mode" >&2; exit 2 ;;
esac
