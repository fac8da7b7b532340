# The two commands a newcomer needs: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DATA_DIR ?= .danlu
PORT ?= 8000
SSH_PORT ?= 2222

.PHONY: images run test lint typecheck bench clean system-deps drill fuzz slurm-dev slurm-dev-stop

# The sandbox's Debian packages (bubblewrap, slirp4netns, nftables …), where missing and installable.
system-deps:
	@tools/install-system-deps.sh

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP) system-deps
	$(BIN)/danlu server --data-dir $(DATA_DIR) --port $(PORT) --ssh-port $(SSH_PORT)

# Tests run in parallel processes (pytest-xdist): most of their time is waiting on real servers,
# sandboxes and meter intervals, so 3 workers fit 2 cores (4 took 1,412 s at stop 37 against 3's 1,330 s:
# the suite is CPU-bound there, load average 6). TEST_WORKERS=0 runs them in one process.
# loadscope sends each module to one worker, so a costly module-scoped fixture (the kill drill) is
# built once per database, not once per worker that got one of its tests (--dist loadgroup would be
# finer, but pytest-xdist 3.8 cannot group tests under pytest 9.2: it renames a node id pytest no
# longer reads).
TEST_WORKERS ?= 3
CJK_FONT := /usr/share/fonts/truetype/wqy/wqy-zenhei.ttc:fonts-wqy-zenhei
test: $(STAMP) system-deps
	@tools/install-system-deps.sh slurmctld:slurm-wlm munged:munge   # the Slurm tests' development cluster
	@tools/install-system-deps.sh chromium:chromium $(CJK_FONT)      # the console's browser tests (Playwright drives it)
	@tools/install-system-deps.sh ssh:openssh-client rsync:rsync     # the SSH gateway's tests use OpenSSH's own clients
	@tools/install-system-deps.sh systemd-analyze:systemd           # the systemd unit's test verifies it
	@tools/install-system-deps.sh mmdebstrap:mmdebstrap             # the image builder's test builds a small image (cached)
	@tools/install-system-deps.sh gocryptfs:gocryptfs               # --encrypt-workspaces' tests
	@tools/install-system-deps.sh prometheus:prometheus             # a real Prometheus scrapes a live server in a test
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/mypy
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadscope --durations=25  # the 25 slowest: the suite's time budget is 20 min

# The deep-learning image (images/deep-learning.toml: Python 3, PyTorch, JupyterLab, TensorBoard, tools),
# built with mmdebstrap + pip and registered: as root on the server's host, with `make run` running in
# another terminal (its admin token is read from $(DATA_DIR)/admin-token). Cached by recipe: a second
# run registers the same tarball. Several GB of downloads the first time (PyTorch's CUDA wheels).
images: $(STAMP)
	@tools/install-system-deps.sh mmdebstrap:mmdebstrap
	DANLU_URL=http://127.0.0.1:$(PORT) DANLU_TOKEN=$$(cat $(DATA_DIR)/admin-token) \
	  $(BIN)/danlu admin image build deep-learning --recipe images/deep-learning.toml

# The schemathesis drill of tests/api/test_fuzz.py with many examples per operation, on SQLite and
# PostgreSQL: FUZZ_EXAMPLES=2000 make fuzz for a long run, FUZZ_SEED=N to replay or vary it.
FUZZ_EXAMPLES ?= 200
fuzz: $(STAMP) system-deps
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest -q -s -p no:cacheprovider --timeout 0 tests/api/test_fuzz.py

bench: $(STAMP) system-deps
	@tools/install-system-deps.sh wrk:wrk nginx:nginx-light
	$(BIN)/python benchmarks/api_latency.py
	$(BIN)/python benchmarks/metering.py
	$(BIN)/python benchmarks/invoices.py
	$(BIN)/python benchmarks/rater.py
	$(BIN)/python benchmarks/sandbox_startup.py
	$(BIN)/python benchmarks/sandbox_many.py
	$(BIN)/python benchmarks/run_accounting.py
	$(BIN)/python benchmarks/encrypted_workspace.py
	$(BIN)/python benchmarks/session_latency.py
	$(BIN)/python benchmarks/port_proxy.py
	$(BIN)/python benchmarks/shell_echo.py
	$(BIN)/python benchmarks/stop_release.py
	$(BIN)/python benchmarks/api_throughput.py
	$(BIN)/python benchmarks/telemetry.py
	$(BIN)/python benchmarks/file_copy.py
	$(BIN)/python benchmarks/snapshots.py
	$(BIN)/python benchmarks/disk_limit.py
	$(BIN)/python benchmarks/cli_start.py

# The kill -9 drill at length (CI runs 12 kills per database in the test suite).
KILLS ?= 100
SEED ?= 1
drill: $(STAMP) system-deps
	$(BIN)/python tools/kill_drill.py --kills $(KILLS) --seed $(SEED)

# A single-node development Slurm cluster (slurm-wlm 22.05; state, config and logs in
# DANLU_SLURM_DIR, default /var/tmp/danlu-slurm); prints the danlu server flags that use it.
NODES ?= 1
slurm-dev:  # make slurm-dev NODES=2: a development cluster of two nodes (docs/slurm.md)
	@DANLU_SLURM_NODES=$(NODES) tools/slurm-dev.sh start

slurm-dev-stop:
	@tools/slurm-dev.sh stop

clean:
	rm -rf $(VENV) $(DATA_DIR) .pytest_cache .mypy_cache .ruff_cache
