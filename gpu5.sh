python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit
export PIPELINK_CUDA_HOME=/usr/local/cuda-13.0 PIPELINK_CACHE_DIR=/tmp/plcache PYTHONUNBUFFERED=1
timeout 65 python3 -m pytest -q -m gpu tests/ 2>&1 | tail -2
timeout 100 python3 case_studies/moe_four_owners/run.py bench --out /tmp/moe > $OUT/bench.log 2>&1; echo "bench rc=$?"; tail -18 $OUT/bench.log
mkdir -p $OUT/res && cp case_studies/moe_four_owners/results/* $OUT/res/ 2>/dev/null
timeout 50 python3 case_studies/moe_four_owners/run.py test --out /tmp/moe > $OUT/test.log 2>&1; echo "test rc=$?"; grep -c "ok " $OUT/test.log; grep FAIL $OUT/test.log | head -3
cp case_studies/moe_four_owners/results/* $OUT/res/ 2>/dev/null
