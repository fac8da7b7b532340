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
# What a path is: "KIND BYTES" (file, folder, link, other) and for a file its version (mtime, ctime, inode: it
# changes with every write), read before the SHA-256 that follows with $2 = 1.
STAT = (
    'p=$1; if [ -d "$p" ]; then echo "folder 0"; '
    'elif [ -f "$p" ]; then echo "file $(stat -L -c "%s %.9Y:%.9Z:%i" -- "$p")"; '
    '[ "$2" != 1 ] || sha256sum < "$p" | cut -c1-64; elif [ -L "$p" ]; then echo "link 0"; '
    'elif [ -e "$p" ]; then echo "other 0"; else echo "no such file or folder: $p" >&2; exit 2; fi'
)
# A resumable upload of $1 collects in a partial file named $2 beside it: PART_SIZE says how much it holds;
# PART_APPEND appends stdin when the client sends from exactly that many bytes ($3; else exit 4, the size on
# stderr) and prints the new size; PART_FINISH renames it into place when its SHA-256 is $3 (else exit 5): the
# server's own of the bytes it fed in ($4) where one attempt sent them all and the file still holds $5 bytes, else
# read from the file ($4 covers the transport: the rental's own processes could still change the file). Both
# hold the partial's lock (flock): an attempt whose client is gone may still be writing what it received, and
# the next one waits for it (up to a minute; else exit 6) before it reads the size.
PART_SIZE = 't="$(dirname -- "$1")/$2"; if [ -f "$t" ]; then stat -c %s -- "$t"; else echo 0; fi'
PART_APPEND = (
    'p=$1; d=$(dirname -- "$p"); [ ! -d "$p" ] || { echo "$p is a folder" >&2; exit 2; }; '
    'mkdir -p -- "$d" || exit 2; t="$d/$2"; exec 9>>"$t" || exit 3; flock -w 60 9 || exit 6; '
    'have=$(stat -c %s -- "$t"); [ "$have" = "$3" ] || { echo "$have" >&2; exit 4; }; '
    'cat >> "$t" || exit 3; stat -c %s -- "$t"'
)
PART_FINISH = (
    't="$(dirname -- "$1")/$2"; exec 9<"$t" || exit 2; flock -w 60 9 || exit 6; '
    'h=$4; [ "$(stat -c %s -- "$t")" = "$5" ] || h=; '
    '[ -n "$h" ] || { h=$(sha256sum < "$t" | cut -c1-64) || exit 2; }; echo "$h"; '
    '[ "$h" = "$3" ] || { rm -f -- "$t"; exit 5; }; mv -f -- "$t" "$1"'
)
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

ALL = frozenset(
    {DOWNLOAD, UPLOAD, FINISH, ABORT, LISTING, STAT, PART_SIZE, PART_APPEND, PART_FINISH, CP_PROBE, CP_HASHES,
     CP_UNPACK, CP_PACK}
)  # fmt: skip


def is_file_command(argv: list[str]) -> bool:
    """``sh -c SCRIPT …`` with one of the platform's file scripts."""
    return len(argv) >= 3 and argv[0] == "sh" and argv[1] == "-c" and argv[2] in ALL
