#!/bin/bash
# The worker-kill measurements of docs/explanation/performance.md ("A worker that dies").
# usage (in a folder holding m16.json from
#   exactlearn random-model --d 16 --heads 8 --seed 3 --den 1 --out m16.json):
#   bash benchmarks/dask_kill/measure.sh DELAY TAG --workers 2
# runs `exactlearn learn --model m16.json --field modular --heads 8 --seed 1 --json ARGS`, SIGKILLs
# one worker process (a child of a nanny) DELAY seconds in, and prints the workers' own count of
# the answers they gave (a preload writes one byte per answer) beside the reported `queries`.
D=$1; T=$2; shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf cnt; mkdir cnt
export CNT=$PWD/cnt DASK_DISTRIBUTED__WORKER__PRELOAD="[\"$HERE/count_preload.py\"]"
start=$(date +%s.%N)
python -m exactlearn.cli learn --model m16.json --field modular --heads 8 --seed 1 --json "$@" > "$T.json" 2> "$T.err" &
P=$!
sleep "$D"
W=$(pgrep -P $P -f spawn_main | head -1)            # a worker: a python child of a nanny
[ -n "$W" ] && kill -9 "$W" && echo "killed $W at $D s"
timeout 300 tail --pid=$P -f /dev/null
wait $P; echo "rc=$? wall=$(echo "$(date +%s.%N) - $start" | bc)"
echo "workers' own count: $(cat cnt/* 2>/dev/null | wc -c)  reported: $(python -c "
import json
try:
    r = json.load(open('$T.json')); print(r['status'], r['queries'], r.get('error'))
except Exception as e: print('no json', e)")"
