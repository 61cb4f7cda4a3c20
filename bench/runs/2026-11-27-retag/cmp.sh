#!/bin/bash
# Compare the tuned ops' cubins between the old (4c6cfee) and new builds, per arch.
for arch in sm_80 sm_90a; do
  for fam in gemm_nt_kernel gemm_wgmma_kernel gemm_tma_kernel dual_gemm_kernel dual_gemm_tma_kernel gemm_fp8_kernel attention_fwd_wgmma_kernel attention_fwd_kernel; do
    o=/work/wt-old/target/cubins/$arch/rustile_ops.$fam.cubin; n=/work/main/target/cubins/$arch/rustile_ops.$fam.cubin
    if [ -f $o ] && [ -f $n ]; then cmp -s $o $n && echo "$arch $fam identical" || echo "$arch $fam DIFFERS"; else echo "$arch $fam missing"; fi
  done
done
