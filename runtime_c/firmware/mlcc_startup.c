/*
 * mlcc_startup: the reset handler and vector table of the Cortex-M firmware that mlcc builds for
 * the cortex-m* targets (copied into the model folder as startup.c; the linker script is
 * firmware.ld, written from the target file's memory map).
 *
 * Reset_Handler enables the floating-point unit (and on Armv8.1-M with MVE, Helium, which the
 * same CPACR bits govern) by giving CP10 and CP11 full access, copies .data from flash to RAM,
 * clears .bss and calls main(). Without the CPACR write the first floating-point instruction
 * faults (QEMU reports a lockup). The arena and the I/O buffers are in their own NOLOAD
 * sections, left uncleared: the model never reads what it did not write.
 *
 * Faults and unexpected interrupts go to mlcc_fault(fault number), which the firmware defines
 * (it reports through semihosting and exits); the weak default spins. In your own firmware
 * project, use your vendor's startup file instead: the library needs none of this.
 */
#include <stdint.h>

extern uint32_t __data_load__, __data_start__, __data_end__, __bss_start__, __bss_end__;
extern uint32_t __stack_top__;
extern int main(void);

void Reset_Handler(void);
void mlcc_fault(unsigned number);
static void fault_entry(void);

#define SCB_CPACR (*(volatile uint32_t *)0xE000ED88u)
#define SCB_ICSR (*(volatile uint32_t *)0xE000ED04u)

__attribute__((weak)) void mlcc_fault(unsigned number) {
    (void)number;
    for (;;) {
    }
}

static void fault_entry(void) { mlcc_fault((unsigned)(SCB_ICSR & 0x1FFu)); }

void Reset_Handler(void) {
    const uint32_t *src = &__data_load__;
    uint32_t *dst;
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
    SCB_CPACR |= 0xFu << 20;            /* CP10, CP11: full access */
    __asm volatile("dsb\n\tisb" ::: "memory");
#endif
    for (dst = &__data_start__; dst < &__data_end__;) *dst++ = *src++;
    for (dst = &__bss_start__; dst < &__bss_end__;) *dst++ = 0;
    (void)main();
    for (;;) {
    }
}

typedef void (*vector)(void);

/* The initial stack pointer, then the reset handler and the 14 system exceptions; the
 * firmware enables no peripheral interrupt, so no device vectors follow. */
__attribute__((section(".vectors"), used)) const vector mlcc_vectors[16] = {
    (vector)(uintptr_t)&__stack_top__, Reset_Handler,
    fault_entry, fault_entry, fault_entry, fault_entry, fault_entry,  /* NMI ... UsageFault */
    fault_entry, 0, 0, 0,                                             /* SecureFault, reserved */
    fault_entry, fault_entry, 0, fault_entry, fault_entry};           /* SVC ... SysTick */
