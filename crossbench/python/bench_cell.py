"""One crypto-bench cell under pytest-benchmark; adapter.py runs it in a
child pytest with the cell's request in $CROSSBENCH_JOB."""
import json
import os

import adapter


def test_cell(benchmark):
    with open(os.environ["CROSSBENCH_JOB"]) as f:
        job = json.load(f)
    lib = adapter.LIBS[job["lib"]]()
    key = lib.load(job["pem"])[0] if "pem" in job else None
    fn, args = adapter.prepare(lib, key, job)
    benchmark(fn, *args)
