#!/bin/bash
# Prints a digest of everything the frozen build (build.spec) depends on: the commit and -dirty flag it
# embeds, every file under edgelet/ (collect_submodules takes untracked modules too), build.spec,
# pyproject.toml, the Python and the packages of the venv given as $1. `make test` rebuilds
# dist/onedir only when this changes.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-.venv/bin/python}
{
	git rev-parse HEAD 2>/dev/null || echo no-git
	git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo dirty
	echo "${EDGELET_BUILD_COMMIT:-}"
	find edgelet build.spec pyproject.toml -type f -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 |
		LC_ALL=C sort -z | xargs -0 sha256sum
	"$py" -VV
	"$py" -m pip freeze --all 2>/dev/null
} | sha256sum | cut -d' ' -f1
