#!/bin/bash
# wheelhouse.sh PYTHON DIR CONSTRAINTS PACKAGE...: download PACKAGE with every dependency, as CONSTRAINTS pins
# them, into DIR once per machine (the Makefile names DIR by CONSTRAINTS' hash), so that a fresh clone installs
# from DIR with --no-index instead of downloading again: pip's HTTP cache stores nothing from a registry that
# answers without Cache-Control, ETag or Last-Modified, as this one does. Complete or absent: the download goes
# to DIR.part and is renamed when done; a lock keeps two clones from downloading at once.
set -euo pipefail
python=$1 dir=$2 constraints=$3
shift 3
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if [ -d "$dir" ]; then
    echo "wheelhouse $dir: already there ($(find "$dir" -name '*.whl' | wc -l) wheels)"
    exit 0
fi
rm -rf "$dir.part"
"$python" -m pip download -q --disable-pip-version-check -d "$dir.part" -c "$constraints" "$@"
mv "$dir.part" "$dir"
echo "wheelhouse $dir: $(find "$dir" -name '*.whl' | wc -l) wheels downloaded"
