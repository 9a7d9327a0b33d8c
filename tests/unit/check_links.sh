#!/bin/sh
# The library and the CLI must not link libcuda, libnccl, libcudart or libstdc++:
# the driver and NCCL are loaded with dlopen at run time; no C++ runtime at all.
# usage: check_links.sh FILE...
status=0
for f in "$@"; do
    if ! deps=$(ldd "$f" 2>&1); then
        echo "ldd failed on $f: $deps"
        status=1
        continue
    fi
    bad=$(printf '%s\n' "$deps" | grep -E 'libcuda\.so|libcudart|libnccl|libstdc\+\+' || true)
    if [ -n "$bad" ]; then
        echo "$f links what it must load at run time or never use:"
        printf '%s\n' "$bad"
        status=1
    else
        echo "$f: ok ($(printf '%s\n' "$deps" | wc -l) libraries, none of libcuda/libnccl/libcudart/libstdc++)"
    fi
    # Nor may it import their symbols through some other path.
    if nm -D --undefined-only "$f" 2>/dev/null | grep -E ' (cu[A-Z][A-Za-z]*|nccl[A-Z][A-Za-z]*)(@|$)'; then
        echo "$f has undefined CUDA/NCCL symbols"
        status=1
    fi
done
exit $status
