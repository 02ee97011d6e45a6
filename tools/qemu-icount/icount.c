/* icount: a QEMU TCG plugin that counts the guest instructions a program executes.
 *
 *     qemu-aarch64 -plugin icount.so -d plugin -D counts.txt PROGRAM ARGS...
 *
 * At exit it writes one line to QEMU's log (stderr without -D):
 *
 *     icount: insns N simd V fp F simd_mem M target aarch64
 *
 * N counts every executed guest instruction. For aarch64 guests the instruction words are
 * decoded into classes (Arm A64 encoding, top-level op0 = bits 28:25):
 *   V  Advanced SIMD vector data processing (op0 = 0111: fmla v.4s, add v.16b, ...),
 *   F  scalar floating point and Advanced SIMD scalar data processing (op0 = 1111: fadd s, ...),
 *   M  loads and stores of SIMD&FP registers (op0 = x1x0 with bit 26 set: ldr q, ld1, str s).
 * For other guests those three are 0.
 *
 * Counting is exact and cheap: when QEMU translates a block, the plugin counts the block's
 * instructions per class once and attaches inline additions to the block (no call into the
 * plugin while the guest runs). A block that stops early (a fault) is still counted whole;
 * programs that exit normally do not do that. The counters are plain 64-bit additions, not
 * atomic: exact for single-threaded guests, which is what the mlcc test harness is.
 *
 * Built with the host compiler: gcc -O2 -shared -fPIC -fvisibility=hidden -o icount.so icount.c
 * (the QEMU symbols are resolved from the emulator at load time). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "qemu_plugin_api.h"

MLCC_QEMU_PLUGIN_EXPORT int qemu_plugin_version = MLCC_QEMU_PLUGIN_API_VERSION;

enum { CLASS_SIMD, CLASS_FP, CLASS_SIMD_MEM, CLASS_OTHER, N_CLASSES };

static struct {
    uint64_t insns;
    uint64_t by_class[N_CLASSES];
    int decode_a64;             /* the guest is aarch64: classify instruction words */
    char target[32];
} counts;

static int a64_class(uint32_t w) {
    const uint32_t op0 = (w >> 25) & 0xfu;
    if ((op0 & 0x7u) == 0x7u) return (op0 & 0x8u) ? CLASS_FP : CLASS_SIMD;
    if ((op0 & 0x5u) == 0x4u && (w & (1u << 26))) return CLASS_SIMD_MEM;
    return CLASS_OTHER;
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    const size_t n = qemu_plugin_tb_n_insns(tb);
    uint64_t per_class[N_CLASSES] = {0};
    size_t i;
    int c;
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &counts.insns, n);
    if (!counts.decode_a64) return;
    for (i = 0; i < n; i++) {
        const struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint32_t w;
        if (qemu_plugin_insn_size(insn) != sizeof w) {
            per_class[CLASS_OTHER]++;
            continue;
        }
        memcpy(&w, qemu_plugin_insn_data(insn), sizeof w);   /* A64 words are little-endian */
        per_class[a64_class(w)]++;
    }
    for (c = 0; c < CLASS_OTHER; c++)
        if (per_class[c])
            qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
                                                     &counts.by_class[c], per_class[c]);
}

static void at_exit(qemu_plugin_id_t id, void *userdata) {
    char line[256];
    (void)id;
    (void)userdata;
    snprintf(line, sizeof line,
             "icount: insns %" PRIu64 " simd %" PRIu64 " fp %" PRIu64 " simd_mem %" PRIu64
             " target %s\n",
             counts.insns, counts.by_class[CLASS_SIMD], counts.by_class[CLASS_FP],
             counts.by_class[CLASS_SIMD_MEM], counts.target);
    qemu_plugin_outs(line);
}

MLCC_QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                                int argc, char **argv) {
    (void)argv;
    if (argc != 0) {
        qemu_plugin_outs("icount: this plugin takes no arguments\n");
        return -1;
    }
    snprintf(counts.target, sizeof counts.target, "%s", info->target_name);
    counts.decode_a64 = strcmp(info->target_name, "aarch64") == 0;
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
