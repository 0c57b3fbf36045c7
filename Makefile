# make verify   the main job (installs what it needs first)
# make test     the test suite
# make data     the Penn Treebank (Mikolov's simple-examples.tgz) under data/ptb: make verify DATA=data/ptb
# make run      single-device reference training          (run.py)
# make run-tf   parameter servers, TensorFlow's runtime   (run_tf.py; ARGS=--sync=false for async)
# make run-horovod  allreduce with Horovod                (run_horovod.py)
# make run-parallax hybrid: sparse on PS, dense allreduced (run_parallax.py)
# make bench    benchmarks (docs/bench.md)
# make soak     tf, horovod and parallax crashed every way, resumed, and compared with an uninterrupted run
# make cluster  NODES nodes on this machine (network namespaces with names, sshd, slurmd) for HOSTS= and sbatch
#               runs; make cluster-down
# make check    HOSTS=h1:1,h2:1: what would stop a run on each host, one line per problem
# make report   report/report.pdf from what make verify and make bench left in RESULTS
# make submission  what a student hands in: verify, bench, report and a manifest in submission/ (STUDENT= names
#               who); make grade SUBMISSION=<their repository>: the TA's grade with this checkout's code;
#               make grade-all SUBMISSIONS=dir/: a class at once, a gradebook (docs/submission.md)
#
# Every run target honours these variables (the flags behind them: python run.py --help).
#   MODEL     the model: lstm (default), transformer, or a path to your model file (docs/your-model.md)
#   CONFIG    the model's configuration (default: its first; lstm: small, tiny, medium, lm1b, ...)
#   STEPS     training steps
#   WARMUP    first steps left out of the throughput figures (50; a quarter of STEPS when that is fewer)
#   SEED      fixes the initial parameters, the synthetic corpus and the dropout masks
#   WORKERS   workers; run.py emulates them, which makes it the reference of a WORKERS-worker run
#   PS        parameter-server tasks (parameter-server runners)
#   DATA      a text in PTB's format (file or directory); empty: the synthetic corpus
#   HOSTS     host:slots,... to run the tasks on over ssh (distributed runners, verify)
#   CKPT_DIR  checkpoint directory; empty: checkpoints/<runner>
#   NET       an emulated cluster: each machine a network namespace, its link shaped to this rate (100mbit,
#             1gbit; needs root); empty: loopback (make bench: 100mbit as root). DELAY adds latency where the kernel
#             has netem (not here)
#   ARGS      any other flags, passed through
#   FAULTS    make verify FAULTS=1: also kill a task of tf, horovod and parallax and resume each (verify.py)
#   MINUTES   make soak: rounds of crashes start for this long (20); SEED draws the crashes (bench/soak.py)
#   NODES     make cluster: how many nodes (3), node1, node2, ...; NET shapes their links; SHARED=0 gives each a
#             private copy of the repository (no shared file system)
#   SAVE_EVERY a checkpoint every this many steps; RESUME=1 continues from the latest complete one (run
#             targets)
#   BENCH     make bench BENCH=quick: W = 2 on the model's first config against run.py's one device, 16
#             steps (minutes); BENCH=crossover: where the hybrid overtakes allgather (the model's most
#             sparse-heavy config: lstm's lm1b-sparse; W = 2, 4, 6, 8); BENCH=validate: the model against its
#             fixed grid of cells, developed and held out (docs/validation.jsonl, about 25 minutes)
#   RESULTS   where the run targets write their results, each model in a directory of its own
#             (RESULTS/lstm/, RESULTS/transformer/), and where make report reads them all (default results);
#             REPORT where make report writes (report)
#   PTB_URL   make data: where to fetch simple-examples.tgz (empty: Mikolov's RNNLM page)
#   TESTS_AT_ONCE  make test: test modules run at a time (2; tests/conftest.py groups them)
#   TRUST, POINTS, SLURM  make grade / grade-all: TRUST=1 runs the student's code without a sandbox (where none can
#             start); POINTS= another rubric of points (assignment/points.ini); SLURM=1 grade-all as one array job
MODEL    ?= lstm
CONFIG   ?=
STEPS    ?= 300
# A quarter of a short run: make verify CONFIG=lm1b STEPS=8 leaves 2 out, not all of them.
WARMUP   ?= $(shell w=$$(( $(STEPS) / 4 )) 2>/dev/null; [ "$$w" -lt 50 ] 2>/dev/null && echo $$w || echo 50)
SEED     ?= 1
WORKERS  ?= 2
PS       ?= 1
DATA     ?=
HOSTS    ?=
CKPT_DIR ?=
NET      ?=
DELAY    ?=
ARGS     ?=
SAVE_EVERY ?=
RESUME   ?=
FAULTS   ?=
MINUTES  ?= 20
NODES    ?= 3
BENCH    ?=
RESULTS  ?= results
REPORT   ?= report
PTB_URL  ?=
TESTS_AT_ONCE ?= 2

VERIFY_STEPS := $(if $(filter command line environment,$(origin STEPS)),$(STEPS),60)
given = $(if $(filter command line environment,$(origin $(1))),$(2))

SHELL  := /bin/bash
# PYTHON=python3.10 make setup: the Python the venv is made from (scripts/find_python.sh); then the venv's.
SETUP_PYTHON := $(if $(filter environment,$(origin PYTHON)),$(PYTHON))
PYTHON := .venv/bin/python
RESULTS_DIR = $(RESULTS)/$(basename $(notdir $(MODEL)))
RUN_FLAGS = --model=$(MODEL) $(if $(CONFIG),--config=$(CONFIG)) --results_dir=$(RESULTS_DIR) \
            --steps=$(STEPS) --warmup_steps=$(WARMUP) --seed=$(SEED) \
            $(if $(DATA),--data_path=$(DATA))
ckpt_dir = --ckpt_dir=$(or $(CKPT_DIR),checkpoints/$(1))
RESUME_FLAGS = $(if $(SAVE_EVERY),--save_every=$(SAVE_EVERY)) $(if $(filter 1,$(RESUME)),--resume)

.PHONY: setup test data run run-tf run-horovod run-parallax verify bench bench-overhead soak cluster cluster-down \
        check report submission submission-report grade grade-all clean

setup: .venv/.setup-done
.venv/.setup-done: requirements.txt scripts/setup.sh launcher/gloo_hostname.c
	PYTHON=$(SETUP_PYTHON) bash scripts/setup.sh
	touch $@

# -rs: why each test skipped; the ten slowest; TESTS_AT_ONCE groups of tests at a time (tests/conftest.py)
test: setup
	$(PYTHON) -m pytest -q -rs --durations=10 -n $(TESTS_AT_ONCE) tests

# Standard library only: python3 when make setup has not made the venv yet.
data:
	$(or $(wildcard $(PYTHON)),python3) scripts/get_data.py --out_dir=data/ptb $(if $(PTB_URL),--url=$(PTB_URL))

# One process on this machine: the variables of distributed runs are refused rather than ignored.
run: setup
	$(if $(HOSTS)$(NET)$(call given,PS,1),$(error HOSTS=, NET=, PS=: make run trains on one device here (run.py)))
	$(PYTHON) run.py $(RUN_FLAGS) --emulate_workers=$(WORKERS) $(call ckpt_dir,run) $(RESUME_FLAGS) $(ARGS)

# HOSTS=h1:2,h2:2 starts the tasks on those hosts over ssh: the workers fill the slots in order, the
# parameter servers go round the hosts. The repository, its .venv and the working directory must be at the
# same paths on every host, reachable by ssh keys (BatchMode).
LAUNCH = $(PYTHON) -m launcher $(1) --workers=$(WORKERS) $(if $(HOSTS),--hosts=$(HOSTS)) \
         $(if $(NET),--net=$(NET)) $(if $(DELAY),--delay=$(DELAY))

run-tf: setup
	$(call LAUNCH,tf) --ps=$(PS) -- $(RUN_FLAGS) $(call ckpt_dir,run_tf) $(RESUME_FLAGS) $(ARGS)

# MPI=1: mpirun starts the ranks (Horovod's MPI controller; setup builds Horovod with MPI when OpenMPI is
# installed), through the launcher like every other run: launch --mpi.
run-horovod: setup
	$(call LAUNCH,horovod) $(if $(filter 1,$(MPI)),--mpi) -- $(RUN_FLAGS) $(call ckpt_dir,run_horovod) \
	    $(RESUME_FLAGS) $(ARGS)

run-parallax: setup
	$(call LAUNCH,parallax) --ps=$(PS) -- $(RUN_FLAGS) $(call ckpt_dir,run_parallax) $(RESUME_FLAGS) $(ARGS)

# The main job: every architecture trains the same model (verify.py). Without STEPS=, 60 steps: about
# 5 minutes for the small config on 2 cores.
verify: setup
	$(PYTHON) verify.py $(subst --steps=$(STEPS),--steps=$(VERIFY_STEPS),$(RUN_FLAGS)) --workers=$(WORKERS) \
	    --ps=$(PS) $(if $(HOSTS),--hosts=$(HOSTS)) $(if $(NET),--net=$(NET)) $(if $(DELAY),--delay=$(DELAY)) \
	    $(if $(CKPT_DIR),--ckpt_dir=$(CKPT_DIR)) $(if $(filter 1,$(FAULTS)),--faults) $(ARGS)

# The architectures on an emulated cluster (bench/run.py): NET (default 100mbit as root, else loopback, unshaped;
# NET=1gbit,10gbit sweeps each) per machine link, one worker and one parameter server per machine; HOSTS=h1:1,h2:1:
# on those machines instead, their links measured first (W = their slots, a parameter server each); RESULTS/MODEL/bench.jsonl and a table per config
# and rate. BENCH=quick: a few minutes.
# BENCH=crossover: allgather against the hybrid at W = 2-8 on lm1b-sparse (RESULTS/lstm/bench-crossover.jsonl).
bench: setup
ifeq ($(BENCH),validate)
	$(PYTHON) -m bench.validate --results_dir=$(RESULTS) $(ARGS)
else
	$(PYTHON) -m bench.run $(if $(NET),--net=$(NET)) $(if $(HOSTS),--hosts=$(HOSTS)) --model=$(MODEL) $(if $(CONFIG),--configs=$(CONFIG)) \
	    --results_dir=$(RESULTS_DIR) \
	    $(call given,WORKERS,--workers=$(WORKERS)) $(call given,PS,--ps=$(PS)) $(if $(DELAY),--delay=$(DELAY)) \
	    $(call given,STEPS,--steps=$(STEPS)) $(call given,WARMUP,--warmup_steps=$(WARMUP)) \
	    $(call given,SEED,--seed=$(SEED)) $(if $(DATA),--data_path=$(DATA)) $(if $(CKPT_DIR),--ckpt_dir=$(CKPT_DIR)) \
	    $(if $(filter quick,$(BENCH)),--quick) $(if $(filter crossover,$(BENCH)),--crossover) $(ARGS)
	$(PYTHON) -m bench.predict --parallax --results_dir=$(RESULTS_DIR)  # with the costs the sweep measured
endif

bench-overhead: setup
	$(if $(HOSTS),$(error HOSTS=: bench-overhead measures run.py on this machine only))
	$(PYTHON) -m bench.overhead $(RUN_FLAGS) $(ARGS)

# The chaos soak (bench/soak.py; docs/cluster.md, "A chaos soak"): each run's length and checkpoints are its own.
soak: setup
	$(if $(HOSTS)$(NET),$(error HOSTS=, NET=: make soak crashes local runs))
	$(if $(call given,STEPS,1),$(error STEPS=: make soak runs until MINUTES are up))
	$(PYTHON) -m bench.soak --minutes=$(MINUTES) --model=$(MODEL) $(if $(CONFIG),--config=$(CONFIG)) \
	    --seed=$(SEED) --workers=$(WORKERS) --ps=$(PS) --results_dir=$(RESULTS_DIR) $(if $(DATA),--data_path=$(DATA)) \
	    $(if $(CKPT_DIR),--ckpt_dir=$(CKPT_DIR)) $(ARGS)

# An emulated cluster of nodes (cluster/; docs/cluster.md, "An emulated cluster of nodes"): node1..NODES, each a
# network namespace with its own address, host name, /tmp, sshd and slurmd (slurmctld on a head node); it prints
# the HOSTS= value and the partition for sbatch. Root.
cluster: setup
	$(PYTHON) -m cluster up --nodes=$(NODES) $(if $(NET),--net=$(NET)) $(if $(filter 0,$(SHARED)),--noshared)

cluster-down: setup
	$(PYTHON) -m cluster down

# What would stop a run on each of HOSTS (launcher/preflight.py; every HOSTS= and Slurm launch runs it first): ssh,
# the same commit, versions and MODEL file, .venv with Horovod, the working directory, interface, ports, clock; names
# and ports between the hosts. One line per problem; exit 2.
check: setup
	$(PYTHON) -m launcher.preflight $(if $(HOSTS),--hosts=$(HOSTS)) --model=$(MODEL) $(ARGS)

# The PDF report, from RESULTS alone (make verify and make bench first; what they did not write is named
# as missing in the report). Writes REPORT/report.pdf, its Typst source (report.typ, data.json) and figures.
report: setup
	$(PYTHON) -m reporting --results_dir=$(RESULTS) --out_dir=$(REPORT)

# What a student hands in (assignment/submit.py; docs/submission.md): verify, the bench in the assignment's window
# (50 warm-up steps of 150; STEPS= and WARMUP= set both runs' steps and the bench's warm-up), the report with
# SUBMISSION/student.md first, and a manifest tying them to the code. Commit SUBMISSION/.
SUBMISSION ?= submission
submission: setup
	$(PYTHON) -m assignment.submit --model=$(MODEL) $(if $(CONFIG),--config=$(CONFIG)) --workers=$(WORKERS) --ps=$(PS) \
	    --seed=$(SEED) $(if $(DATA),--data_path=$(DATA)) $(if $(HOSTS),--hosts=$(HOSTS)) $(if $(NET),--net=$(NET)) \
	    $(call given,STEPS,--verify_steps=$(STEPS) --bench_steps=$(STEPS)) $(call given,WARMUP,--warmup_steps=$(WARMUP)) \
	    $(if $(STUDENT),--student='$(STUDENT)') --out=$(SUBMISSION) $(ARGS)

# After editing SUBMISSION/student.md: the report typeset again, with the settings the manifest records.
submission-report: setup
	$(PYTHON) -m assignment.submit --report_only --out=$(SUBMISSION) $(ARGS)

# The TA's side (assignment/grade.py), in the TA's own checkout: SUBMISSION= a student's repository (a path or
# git URL), an archive of it, or a folder; its toolkit files against this checkout's (ALLOW= those it may change),
# the submission against itself, verify rerun with this checkout's code (BENCH=1: a short bench too), the rubric.
# Exit 0 when everything reproduces, 1 naming what does not. In the student's own clone, make grade checks the
# submission with the student's code. The student's code runs only in sandboxes (launcher/sandbox.py, bubblewrap);
# where none can start, TRUST=1 runs it with your rights.
grade: setup
	$(PYTHON) -m assignment.grade --submission=$(SUBMISSION) $(if $(filter 1,$(BENCH)),--bench) \
	    $(if $(ALLOW),--allow=$(ALLOW)) $(if $(filter 1,$(TRUST)),--trust) \
	    $(if $(POINTS),--points=$(POINTS)) $(ARGS)

# A class at once (assignment/gradebook.py): every submission in SUBMISSIONS (a folder, repository or archive
# each) graded, grade/gradebook.csv and grade/gradebook.md written, copies flagged. SLURM=1: each graded as a
# task of one Slurm array job, across the cluster's nodes.
grade-all: setup
	$(PYTHON) -m assignment.gradebook --submissions=$(SUBMISSIONS) $(if $(filter 1,$(BENCH)),--bench) \
	    $(if $(ALLOW),--allow=$(ALLOW)) $(if $(filter 1,$(TRUST)),--trust) \
	    $(if $(POINTS),--points=$(POINTS)) $(if $(filter 1,$(SLURM)),--slurm) $(ARGS)

clean:
	rm -rf checkpoints $(RESULTS) $(REPORT)

# Containers (docker/; docs/architecture.md: Containers). DOCKER_IMAGE names the image; DOCKER_BASE is its base (default
# python:3.11-slim; one that cannot be pulled, or DOCKER_BASE=debootstrap, is made from Debian's packages).
# docker/engine.sh starts a Docker engine when none answers (root: it installs docker.io) and leaves it running.
DOCKER_IMAGE ?= lstm-dist
DOCKER_BASE  ?=

.PHONY: docker-engine docker-build docker-verify

docker-engine:
	@bash docker/engine.sh start >/dev/null

docker-build: docker-engine
	bash docker/build.sh $(DOCKER_IMAGE) $(DOCKER_BASE)

# make verify with every task, the reference's too, in a container of its own (launcher/starters/docker.py);
# the table and RESULTS/MODEL/verify.json on this machine, as make verify writes them. DATA must lie under this
# directory, the one the containers see.
docker-verify: setup docker-build
	$(if $(HOSTS),$(error HOSTS=: docker-verify runs every task in a container on this machine))
	$(PYTHON) verify.py $(subst --steps=$(STEPS),--steps=$(VERIFY_STEPS),$(RUN_FLAGS)) --workers=$(WORKERS) \
	    --ps=$(PS) --docker=$(DOCKER_IMAGE) $(if $(CKPT_DIR),--ckpt_dir=$(CKPT_DIR)) $(ARGS)
