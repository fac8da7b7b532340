"""The commands the platform itself runs in a rental for files: danlu.access.files (HTTP, the console) and
``danlu cp`` (over an exec session). Only these may run in a stopped rental's transfer sandbox
(danlu.access.transfer): a stopped rental is not free compute. Each gets its paths as "$1", "$2" (never in the
script's text), run as ``sh -c SCRIPT NAME ARGS…``."""

from __future__ import annotations

# files over HTTP
# A first line says what follows: "D" (a folder, as tar) or "F" and the file's size; then the bytes from offset $2
# ($3 of them, or to the end when $3 is -1: a Range request).
DOWNLOAD = (
    'p=$1; if [ -d "$p" ]; then echo D; exec tar -C "$p" -cf - . 2>/dev/null; '
    'elif [ -f "$p" ]; then echo "F$(stat -L -c %s -- "$p")"; '
    'if [ "$3" -lt 0 ]; then exec tail -c "+$(($2 + 1))" -- "$p" 2>/dev/null; fi; '
    'tail -c "+$(($2 + 1))" -- "$p" 2>/dev/null | head -c "$3"; exit 0; fi; '
    'echo "no such file or folder: $p" >&2; exit 2'
)
UPLOAD = (
    'p=$1; d=$(dirname -- "$p"); [ ! -d "$p" ] || { echo "$p is a folder" >&2; exit 2; }; '
    'mkdir -p -- "$d" || exit 2; t="$d/.danlu-upload-$$"; '
    'cat > "$t" || { rm -f -- "$t"; exit 3; }; '
    'sha256sum < "$t" | cut -c1-64 && printf "%s\\n" "$t"'
)
FINISH = 'mv -f -- "$1" "$2"'
ABORT = 'rm -f -- "$1"'
LISTING = (
    'cd -- "$1" 2>/dev/null || { echo "no such folder: $1" >&2; exit 2; }; '
    "exec find . -mindepth 1 -maxdepth 1 -printf '%y\\t%s\\t%T@\\t%P\\0' 2>/dev/null"
)

# danlu cp: is the destination a folder, and what the workspace (and a job's checkpoints) hold now
CP_PROBE = (
    'if [ -d "$1" ]; then echo dir; else echo new; fi; du -skx /workspace "${DANLU_CHECKPOINT_DIR:-/workspace}"'
    " 2>/dev/null"
)
CP_HASHES = 'cd -- "$1" && find "$2" -type f -print0 | xargs -0 -r sha256sum -z --'
CP_UNPACK = 'mkdir -p -- "$1" && exec tar -x -f - -C "$1" --no-same-owner'
CP_PACK = 'cd -- "$1" && exec tar -c -f - -- "$2"'

ALL = frozenset({DOWNLOAD, UPLOAD, FINISH, ABORT, LISTING, CP_PROBE, CP_HASHES, CP_UNPACK, CP_PACK})


def is_file_command(argv: list[str]) -> bool:
    """``sh -c SCRIPT …`` with one of the platform's file scripts."""
    return len(argv) >= 3 and argv[0] == "sh" and argv[1] == "-c" and argv[2] in ALL
