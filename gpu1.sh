python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit
export PIPELINK_CUDA_HOME=/usr/local/cuda-13.0 PIPELINK_CACHE_DIR=/tmp/plcache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
(time python3 -m pytest -q -x -m gpu tests/ 2>&1 | tail -15) 2>&1
(time python3 case_studies/moe_four_owners/run.py test 2>&1 | tail -60) 2>&1
mkdir -p $OUT/res && cp -r case_studies/moe_four_owners/results/* $OUT/res/ 2>/dev/null
