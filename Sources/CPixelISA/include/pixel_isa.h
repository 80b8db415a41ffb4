#ifndef PIXEL_ISA_H
#define PIXEL_ISA_H

/* What the CPU and the OS together allow the pixel kernels to run: 0 baseline x86-64 (SSE2),
 * 1 AVX2 with FMA, BMI1/2, F16C, LZCNT and MOVBE (x86-64-v3's set), 2 x86-64-v4 (AVX-512 F, BW, DQ, VL, CD). The OS part matters:
 * a kernel that does not save the wide registers must not see them used. */
int matte_pixel_isa_level(void);

/* 1 when the kernel can give this process AMX's tile state (Linux 5.16 and later on a CPU with AMX),
 * else 0: the CPU's amx flags alone do not say it. (Here because this is the project's C probe of
 * what the CPU and the OS allow; the engine's precision=auto reads it.) */
int matte_kernel_enables_amx(void);

#endif
