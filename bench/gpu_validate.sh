#!/usr/bin/env bash
# Validate ddp-doctor on a bare GPU machine in one command, offline, without touching its torch.
#
#   bench/gpu_validate.sh [--python PY] [--wheelhouse DIR] [--out DIR] [--dry-run]
#       On the GPU machine: a venv with --system-site-packages on PY (default python3), so
#       the machine's own torch is used as it is; ddp-doctor and the suite's test packages
#       installed into it from DIR only (pip --no-index); torch's version, file and CUDA
#       compared before and after (the run stops if pip touched torch). Then, each under
#       `timeout` and carrying on past a failure: the GPU suite (pytest tests/gpu -m gpu,
#       which also plants the faults), `ddp-doctor --json` (doctor), `check --save-facts`,
#       `smoke --device cuda --scaling`, and nvidia-smi's views. Everything goes into the
#       output folder (default gpu-validate-HOST-DATE) with summary.md; exit 0 only when
#       every step passed. --dry-run does the set-up for real and skips the GPU steps.
#       GPU_VALIDATE_SUITE_TIMEOUT (default 420 s) and GPU_VALIDATE_STEP_TIMEOUT (240 s)
#       set the deadlines of the suite and of each other step, for a short lease.
#
#   bench/gpu_validate.sh --prepare-wheelhouse DIR [--python-version X.Y]
#       On a networked machine first: ddp-doctor's wheel (this checkout) and the wheels of
#       its runtime dependencies and the suite's test packages, torch excluded, for the GPU
#       machine's Python (default: this python's) on manylinux x86_64. Carry DIR over.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# What the GPU suite needs beyond ddp-doctor itself (pyproject's test extra without the
# linters, the packaging tools and torch).
TEST_PACKAGES=("pytest>=8" "pytest-timeout>=2.2" "jsonschema>=4.18")
# Deadlines per step; a lease with little device time left can shorten them.
SUITE_TIMEOUT=${GPU_VALIDATE_SUITE_TIMEOUT:-420}
STEP_TIMEOUT=${GPU_VALIDATE_STEP_TIMEOUT:-240}

PY=python3
WHEELHOUSE=""
OUT=""
DRY_RUN=0
PREPARE=""
PYVER=""

die() { echo "gpu_validate: error: $*" >&2; exit 2; }

usage() { sed -n '2,/^[^#]/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --python) [ $# -ge 2 ] || die "--python needs a path"; PY=$2; shift 2 ;;
        --wheelhouse) [ $# -ge 2 ] || die "--wheelhouse needs a folder"; WHEELHOUSE=$2; shift 2 ;;
        --out) [ $# -ge 2 ] || die "--out needs a folder"; OUT=$2; shift 2 ;;
        --dry-run) DRY_RUN=1; shift ;;
        --prepare-wheelhouse) [ $# -ge 2 ] || die "--prepare-wheelhouse needs a folder"
            PREPARE=$2; shift 2 ;;
        --python-version) [ $# -ge 2 ] || die "--python-version needs X.Y"; PYVER=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

# ------------------------------------------------------------------ --prepare-wheelhouse

runtime_requirements() {
    # pyproject's dependencies, as pip reads them (markers kept), torch never among them.
    "$1" - "$ROOT/pyproject.toml" <<'PYEOF'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
for line in block.splitlines():
    line = line.split("#", 1)[0].strip().rstrip(",")
    if line.startswith('"'):
        # Markers dropped: pip download judges them by this python, not the target's, so
        # a dependency of older Pythons only (tomli) is fetched too; a spare wheel is cheap.
        req = line.strip('"').replace('\\"', '"').split(";", 1)[0].strip()
        if not re.match(r"torch\b", req):
            print(req)
PYEOF
}

if [ -n "$PREPARE" ]; then
    command -v "$PY" >/dev/null 2>&1 || die "no python at '$PY'"
    [ -n "$PYVER" ] || PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    mkdir -p "$PREPARE" || die "cannot create $PREPARE"
    mapfile -t REQS < <(runtime_requirements "$PY")
    [ "${#REQS[@]}" -gt 0 ] || die "could not read the dependencies from pyproject.toml"
    # pip download judges the packages' own markers by this python too: what pytest needs
    # on Pythons before 3.11 is named here, since a 3.11+ pip would leave it out.
    if "$PY" -c 'import sys; sys.exit(0 if tuple(map(int, sys.argv[1].split("."))) < (3, 11) else 1)' "$PYVER"; then
        REQS+=("exceptiongroup>=1" "tomli>=1")
    fi
    echo "gpu_validate: ddp-doctor's wheel from $ROOT"
    "$PY" -m pip wheel --no-deps -w "$PREPARE" "$ROOT" || die "building ddp-doctor's wheel failed"
    echo "gpu_validate: wheels for Python $PYVER: ${REQS[*]} ${TEST_PACKAGES[*]}"
    "$PY" -m pip download --dest "$PREPARE" --only-binary=:all: --python-version "$PYVER" \
        --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_28_x86_64 \
        "${REQS[@]}" "${TEST_PACKAGES[@]}" || die "pip download failed"
    if ls "$PREPARE" | grep -qi '^torch-'; then
        die "a torch wheel ended up in $PREPARE: remove it (the GPU machine's torch is used)"
    fi
    echo "gpu_validate: wheelhouse ready: $PREPARE ($(ls "$PREPARE" | wc -l) files)"
    exit 0
fi

# ------------------------------------------------------------------ the validation run

[ -n "$WHEELHOUSE" ] || die "--wheelhouse DIR is needed (make it with --prepare-wheelhouse)"
[ -d "$WHEELHOUSE" ] || die "no wheelhouse folder $WHEELHOUSE"
WHEELHOUSE=$(cd "$WHEELHOUSE" && pwd)
command -v "$PY" >/dev/null 2>&1 || die "no python at '$PY'"
[ -n "$OUT" ] || OUT="gpu-validate-$(hostname -s 2>/dev/null || hostname)-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT" || die "cannot create $OUT"
OUT=$(cd "$OUT" && pwd)
STEPS="$OUT/steps.tsv"
: > "$STEPS"
rm -f "$OUT/DRY_RUN"
[ "$DRY_RUN" = 1 ] && touch "$OUT/DRY_RUN"
VENV="$OUT/venv"
VPY="$VENV/bin/python"
DOCTOR="$VENV/bin/ddp-doctor"

log() { echo "gpu_validate: $*" | tee -a "$OUT/run.log" >&2; }

record() {  # NAME RC SECONDS NOTE
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$STEPS"
}

step() {  # NAME TIMEOUT_S LOGFILE COMMAND...: run it, record its exit code and duration
    local name=$1 limit=$2 logfile=$3 start rc
    shift 3
    log "step: $name (at most ${limit}s): $*"
    start=$(date +%s.%N)
    timeout --kill-after=15 "$limit" "$@" > "$logfile" 2>&1
    rc=$?
    local took
    took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    local note=""
    [ "$rc" = 124 ] && note="timed out after ${limit}s"
    record "$name" "$rc" "$took" "$note"
    log "step: $name: exit code $rc in ${took}s"
    return 0
}

skip() {  # NAME: a GPU step a dry run leaves out
    record "$1" skipped 0 "dry run: GPU step not run"
    log "skipped (dry run): $1"
}

torch_identity() {  # PYTHON: torch's version, file and CUDA as one JSON line
    "$1" -c 'import json, torch; print(json.dumps({"version": torch.__version__,
"file": torch.__file__, "cuda": torch.version.cuda}, sort_keys=True))' 2>>"$OUT/run.log"
}

# 1. The machine's torch, before anything is installed.
log "python: $PY; output: $OUT"
BEFORE=$(torch_identity "$PY") || {
    record "torch before" 1 0 "torch does not import in $PY"
    log "torch does not import in $PY: nothing to validate against"
    "$PY" "$ROOT/bench/gpu_validate_summary.py" "$OUT"
    exit 1
}
log "torch before: $BEFORE"

# 2. The venv over the machine's packages, and ddp-doctor installed offline into it.
start=$(date +%s)
setup_rc=0
rm -rf "$VENV"
"$PY" -m venv --system-site-packages "$VENV" >> "$OUT/run.log" 2>&1 || setup_rc=1
if [ "$setup_rc" = 0 ]; then
    # A python that is itself a venv keeps its packages (torch) in its own site-packages,
    # which --system-site-packages does not reach: a .pth file puts them on the path
    # behind the new venv's own.
    "$PY" -c 'import site, sys; [print(p) for p in site.getsitepackages()]
if sys.prefix == sys.base_prefix: raise SystemExit(3)' > "$OUT/machine-site.txt" 2>>"$OUT/run.log"
    case $? in
        0) PURELIB=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
           cp "$OUT/machine-site.txt" "$PURELIB/_gpu_validate_machine_site.pth"
           log "$PY is a venv: its site-packages are on the new venv's path" ;;
        3) : ;;
        *) setup_rc=1 ;;
    esac
fi
WHEEL=$(ls "$WHEELHOUSE"/ddp_doctor-*.whl 2>/dev/null | sort -V | tail -n 1)
if [ "$setup_rc" = 0 ]; then
    if [ -n "$WHEEL" ]; then
        TARGET="$WHEEL"
    else
        TARGET="$ROOT"  # no wheel carried: build this checkout (setuptools from the machine)
    fi
    log "installing $TARGET ${TEST_PACKAGES[*]} from $WHEELHOUSE only"
    # First ddp-doctor alone, into the venv even if the machine's packages hold a copy;
    # then what it and the suite need, from the machine where it is there already.
    # pip reads no configuration here: a configured find-links folder, constraint or
    # index would add packages that are not the wheelhouse's.
    UNSET=()
    for name in $(compgen -e | grep '^PIP_'); do UNSET+=(-u "$name"); done
    PIP=(env ${UNSET[@]+"${UNSET[@]}"} PIP_CONFIG_FILE=/dev/null "$VPY" -m pip install --no-index
         --find-links "$WHEELHOUSE" --no-build-isolation --disable-pip-version-check)
    { "${PIP[@]}" --force-reinstall --no-deps "$TARGET" \
        && "${PIP[@]}" "$TARGET" "${TEST_PACKAGES[@]}"; } > "$OUT/pip-install.log" 2>&1 \
        || setup_rc=1
    if grep -Eiq '^(Collecting|Uninstalling|Attempting uninstall:) torch([^a-z_-]|$)' \
            "$OUT/pip-install.log" \
       || grep -Eiq '^Installing collected packages:.*\btorch\b' "$OUT/pip-install.log"; then
        log "PIP TOUCHED TORCH: see $OUT/pip-install.log"
        setup_rc=1
    fi
fi
AFTER=$(torch_identity "$PY") || AFTER="torch no longer imports in $PY"
IN_VENV=$(torch_identity "$VPY") || IN_VENV="torch does not import in the venv"
echo "{\"before\": $BEFORE, \"after\": $(echo "$AFTER" | grep '^{' || echo null), \"venv\": $(echo "$IN_VENV" | grep '^{' || echo null)}" > "$OUT/torch-identity.json"
note=""
if [ "$AFTER" != "$BEFORE" ] || [ "$IN_VENV" != "$BEFORE" ]; then
    log "TORCH CHANGED: before $BEFORE; after $AFTER; in the venv $IN_VENV"
    note="torch changed or not visible in the venv"
    setup_rc=1
fi
"$VPY" -c 'import ddp_doctor, sys; print(ddp_doctor.__version__, ddp_doctor.__file__)' \
    > "$OUT/ddp-doctor-version.txt" 2>>"$OUT/run.log" || { setup_rc=1; note="ddp_doctor does not import in the venv"; }
record "install (venv, offline pip, torch untouched)" "$setup_rc" "$(( $(date +%s) - start ))" "$note"
if [ "$setup_rc" != 0 ]; then
    log "set-up failed: see $OUT/run.log and $OUT/pip-install.log"
    "$PY" "$ROOT/bench/gpu_validate_summary.py" "$OUT"
    exit 1
fi
log "torch unchanged: $BEFORE"

# 3. The machine, as the summary describes it.
"$VPY" - "$OUT" <<'PYEOF' >> "$OUT/run.log" 2>&1
import json, os, platform, shutil, subprocess, sys
import ddp_doctor, torch
out = sys.argv[1]
def smi(*args):
    if not shutil.which("nvidia-smi"):
        return None
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True,
                              timeout=60).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None
gpus = smi("--query-gpu=name", "--format=csv,noheader")
machine = {
    "host": platform.node(),
    "gpus": "; ".join(gpus.splitlines()) if gpus else "none (no nvidia-smi or no GPU)",
    "driver": (smi("--query-gpu=driver_version", "--format=csv,noheader") or "-").splitlines()[0],
    "python": f"{sys.executable} ({platform.python_version()})",
    "torch": torch.__version__, "torch_cuda": torch.version.cuda, "torch_file": torch.__file__,
    "ddp_doctor": ddp_doctor.__version__, "ddp_doctor_file": ddp_doctor.__file__,
}
with open(os.path.join(out, "machine.json"), "w", encoding="utf-8") as f:
    json.dump(machine, f, indent=2)
PYEOF

# 4. The GPU steps.
if [ "$DRY_RUN" = 1 ]; then
    for name in "nvidia-smi" "nvidia-smi -q" "nvidia-smi topo -m" \
                "GPU suite (pytest tests/gpu -m gpu, the planted faults included)" \
                "ddp-doctor --json (doctor)" "ddp-doctor check --save-facts" \
                "ddp-doctor smoke --device cuda --scaling" \
                "ddp-doctor smoke --nproc 2 --backend gloo (2 ranks sharing a GPU)" \
                "ddp-doctor smoke --trainer ultralytics"; do
        skip "$name"
    done
else
    step "nvidia-smi" 60 "$OUT/nvidia-smi.txt" nvidia-smi
    step "nvidia-smi -q" 60 "$OUT/nvidia-smi-q.txt" nvidia-smi -q
    step "nvidia-smi topo -m" 60 "$OUT/nvidia-smi-topo.txt" nvidia-smi topo -m
    nvidia-smi -L > "$OUT/nvidia-smi-L.txt" 2>&1
    # The suite runs from the checkout (its tests/) against the venv's ddp-doctor.
    step "GPU suite (pytest tests/gpu -m gpu, the planted faults included)" "$SUITE_TIMEOUT" \
        "$OUT/suite.log" bash -c 'cd "$0" && exec "$@"' "$ROOT" "$VPY" -m pytest tests/gpu \
        -m gpu -v -s -rA -p no:cacheprovider --junitxml "$OUT/suite.xml" \
        --basetemp "$OUT/suite-files"
    step "ddp-doctor --json (doctor)" "$STEP_TIMEOUT" "$OUT/doctor.log" \
        "$DOCTOR" --json "$OUT/doctor.json" --markdown "$OUT/doctor.md"
    step "ddp-doctor check --save-facts" "$STEP_TIMEOUT" "$OUT/check.log" \
        "$DOCTOR" check --json "$OUT/check.json" --save-facts "$OUT/facts.json"
    step "ddp-doctor smoke --device cuda --scaling" "$STEP_TIMEOUT" "$OUT/smoke.log" \
        "$DOCTOR" smoke --device cuda --scaling --json "$OUT/smoke.json"
    # The multi-rank CUDA paths where one GPU exists: NCCL refuses two ranks on one GPU,
    # gloo does not (the report says NCCL across GPUs was not proven).
    step "ddp-doctor smoke --nproc 2 --backend gloo (2 ranks sharing a GPU)" "$STEP_TIMEOUT" \
        "$OUT/smoke-gloo.log" "$DOCTOR" smoke --device cuda --nproc 2 --backend gloo \
        --json "$OUT/smoke-gloo.json"
    # The user's own trainer, through its own DDP path, when the venv has Ultralytics.
    if "$VPY" -c 'import ultralytics' > /dev/null 2>&1; then
        step "ddp-doctor smoke --trainer ultralytics" "$STEP_TIMEOUT" "$OUT/smoke-ultra.log" \
            "$DOCTOR" smoke --trainer ultralytics --device cuda --json "$OUT/smoke-ultra.json"
    else
        record "ddp-doctor smoke --trainer ultralytics" skipped 0 \
            "Ultralytics is not installed in the venv (add its wheels to the wheelhouse)"
    fi
fi

"$VPY" "$ROOT/bench/gpu_validate_summary.py" "$OUT"
rc=$?
log "summary: $OUT/summary.md (exit code $rc)"
exit "$rc"
