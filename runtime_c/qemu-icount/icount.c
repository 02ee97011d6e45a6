/* icount: a QEMU TCG plugin that counts the guest instructions a program executes.
 *
 *     qemu-aarch64 -plugin icount.so -d plugin -D counts.txt PROGRAM ARGS...
 *     qemu-system-arm ... -plugin icount.so,mark=0x1235 -d plugin -kernel firmware.elf
 *
 * At exit it writes one line to QEMU's log (stderr without -D):
 *
 *     icount: insns N simd V fp F simd_mem M target aarch64
 *
 * With mark=ADDRESS (hexadecimal; the address of a function that the program calls between
 * the parts it wants counted apart, such as the layers of a model), it also writes
 *
 *     icount: marks C1 C2 ...
 *
 * where Ci is the count of instructions executed when the program reached ADDRESS for the
 * i-th time (up to MAX_MARKS times): the differences are the instructions between marks.
 * (The count includes the whole translated block that starts at ADDRESS: a constant offset,
 * which the differences cancel.)
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

enum { MAX_MARKS = 1 << 16 };

static struct {
    uint64_t insns;
    uint64_t by_class[N_CLASSES];
    int decode_a64;             /* the guest is aarch64: classify instruction words */
    char target[32];
    uint64_t mark;              /* the address of mark=, or 0 */
    size_t n_marks;
    uint64_t marks[MAX_MARKS];
} counts;

static void at_mark(unsigned int vcpu, void *userdata) {
    (void)vcpu;
    (void)userdata;
    if (counts.n_marks < MAX_MARKS) counts.marks[counts.n_marks++] = counts.insns;
}

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
    for (i = 0; counts.mark && i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        if (qemu_plugin_insn_vaddr(insn) == counts.mark)
            qemu_plugin_register_vcpu_insn_exec_cb(insn, at_mark, QEMU_PLUGIN_CB_NO_REGS, NULL);
    }
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
    if (counts.mark) {
        size_t i;
        qemu_plugin_outs("icount: marks");
        for (i = 0; i < counts.n_marks; i++) {
            snprintf(line, sizeof line, " %" PRIu64, counts.marks[i]);
            qemu_plugin_outs(line);
        }
        qemu_plugin_outs("\n");
    }
}

static int parse_mark(const char *arg) {
    const char *p = arg + 5;
    uint64_t v = 0;
    if (strncmp(arg, "mark=", 5) != 0) return 0;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) p += 2;
    if (*p == '\0') return 0;
    for (; *p; p++) {
        int d = (*p >= '0' && *p <= '9') ? *p - '0'
              : (*p >= 'a' && *p <= 'f') ? *p - 'a' + 10
              : (*p >= 'A' && *p <= 'F') ? *p - 'A' + 10 : -1;
        if (d < 0 || v >> 60) return 0;
        v = v << 4 | (uint64_t)d;
    }
    counts.mark = v;
    return v != 0;
}

MLCC_QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                                int argc, char **argv) {
    if (argc > 1 || (argc == 1 && !parse_mark(argv[0]))) {
        qemu_plugin_outs("icount: the only argument is mark=ADDRESS (hexadecimal)\n");
        return -1;
    }
    snprintf(counts.target, sizeof counts.target, "%s", info->target_name);
    counts.decode_a64 = strcmp(info->target_name, "aarch64") == 0;
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
