#!/bin/bash
# Compare every cubin of this build with a copy of the build at 77934f1 (/work/cubins-base), per arch.
for arch in sm_80 sm_90a; do
  for f in target/cubins/$arch/*.cubin; do b=$(basename $f)
    if [ -f /work/cubins-base/$arch/$b ]; then cmp -s $f /work/cubins-base/$arch/$b && echo "$arch $b identical" || echo "$arch $b DIFFERS"; else echo "$arch $b new"; fi
  done
done
