/*
 * lwIP architecture port for wasm32 (clang --target=wasm32-wasi, wasi-libc):
 * little-endian, stdint types, randomness and assertion reports from the host
 * (imports defined in bbnet.c). Diagnostics are compiled out.
 */
#ifndef BB_ARCH_CC_H
#define BB_ARCH_CC_H

#include <stdint.h>
#include <stddef.h>

#define BYTE_ORDER LITTLE_ENDIAN
#define LWIP_NO_CTYPE_H 1
#define LWIP_PLATFORM_DIAG(x) do { } while (0)

void bb_assert_failed(const char *message, const char *file, int line) __attribute__((noreturn));
#define LWIP_PLATFORM_ASSERT(x) bb_assert_failed((x), __FILE__, __LINE__)

uint32_t bb_random(void);
#define LWIP_RAND() bb_random()

#endif /* BB_ARCH_CC_H */
