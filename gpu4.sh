python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit
export PIPELINK_CUDA_HOME=/usr/local/cuda-13.0 PIPELINK_CACHE_DIR=/tmp/plcache PYTHONUNBUFFERED=1
timeout 300 python3 case_studies/moe_four_owners/run.py all --out /tmp/moe > $OUT/all.log 2>&1; echo "all rc=$?"
grep -v "^  .*launch [12]: ok" $OUT/all.log | grep -v "^   " | tail -40
mkdir -p $OUT/res && cp case_studies/moe_four_owners/results/* $OUT/res/ 2>/dev/null
timeout 150 python3 -m pytest -q -m gpu tests/ 2>&1 | tail -3
