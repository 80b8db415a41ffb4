#include "pixel_isa.h"

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
