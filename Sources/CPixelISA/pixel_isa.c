#include "pixel_isa.h"

#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

int matte_pixel_isa_level(void) {
#if defined(__x86_64__)
    /* The compiler's CPU probe checks the CPUID bits and, for AVX and AVX-512, that XCR0 enables
     * the registers (the OS saves them on a context switch). */
    __builtin_cpu_init();
    /* Everything -target-cpu haswell lets the compiler emit (the wider build also assumes these). */
    int v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi")
        && __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("lzcnt")
        && __builtin_cpu_supports("movbe");
    int v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd");
    return v4 ? 2 : v3 ? 1 : 0;
#else
    return 0;
#endif
}

int matte_kernel_enables_amx(void) {
#if defined(__x86_64__) && defined(__linux__) && defined(SYS_arch_prctl)
    /* ARCH_GET_XCOMP_SUPP (Linux 5.16 on): the extended states the kernel can give a process; AMX's
     * tile data is state 18. An older kernel answers EINVAL, and cannot run AMX however the CPU's
     * flags read. Read-only: nothing is requested (OpenVINO asks for the tiles itself). */
    unsigned long long states = 0;
    if (syscall(SYS_arch_prctl, 0x1021, &states) != 0) return 0;
    return (int)((states >> 18) & 1);
#else
    return 0;
#endif
}
