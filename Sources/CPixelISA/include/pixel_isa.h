#ifndef PIXEL_ISA_H
#define PIXEL_ISA_H

/* What the CPU and the OS together allow the pixel kernels to run: 0 baseline x86-64 (SSE2),
 * 1 AVX2 with FMA, BMI1/2, F16C, LZCNT and MOVBE (x86-64-v3's set), 2 x86-64-v4 (AVX-512 F, BW, DQ, VL, CD). The OS part matters:
 * a kernel that does not save the wide registers must not see them used. */
int matte_pixel_isa_level(void);

#endif
