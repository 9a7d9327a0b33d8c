# common.sh: sourced by the CLI test scripts. A scratch directory $tmp that is
# removed on exit, and fail MESSAGE, which reports and exits 1.
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*" >&2
    exit 1
}
