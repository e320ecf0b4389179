python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit
export PIPELINK_CUDA_HOME=/usr/local/cuda-13.0 PIPELINK_CACHE_DIR=/tmp/plcache PYTHONUNBUFFERED=1
timeout 200 python3 case_studies/moe_four_owners/run.py smoke --out /tmp/moe 2>&1 | tee $OUT/smoke.log | tail -20
echo "smoke rc=${PIPESTATUS[0]}"
timeout 300 python3 case_studies/moe_four_owners/run.py test --out /tmp/moe > $OUT/test.log 2>&1; echo "test rc=$?"; tail -45 $OUT/test.log
