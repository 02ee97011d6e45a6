/* The part of QEMU's TCG plugin API (API version 1, as in QEMU 7.2) that icount.c uses,
 * declared from the public documentation: https://qemu.readthedocs.io/en/v7.2.0/devel/tcg-plugins.html
 *
 * Debian's qemu-user ships the emulator with plugin support but no qemu-plugin.h, so the plugin
 * declares what it calls. The emulator resolves these symbols when it loads the plugin (they
 * are exported by the qemu-aarch64 executable), checks the exported `qemu_plugin_version`
 * against the range of API versions it supports, then calls `qemu_plugin_install`.
 * Only pointers to the opaque handles cross the boundary; `qemu_info_t` is the one structure
 * read here, and only its leading fields (target name, version range). */
#ifndef MLCC_QEMU_PLUGIN_API_H
#define MLCC_QEMU_PLUGIN_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MLCC_QEMU_PLUGIN_API_VERSION 1
#define MLCC_QEMU_PLUGIN_EXPORT __attribute__((visibility("default")))

typedef uint64_t qemu_plugin_id_t;

/* Handed to qemu_plugin_install: what the emulator is and which API versions it offers. */
typedef struct {
    const char *target_name;   /* "aarch64", "x86_64", ... */
    struct {
        int min;
        int cur;
    } version;
    bool system_emulation;
    /* a union with the system emulation's vCPU counts follows; not used here */
} qemu_info_t;

struct qemu_plugin_tb;     /* a translation block, valid during the translation callback */
struct qemu_plugin_insn;   /* one guest instruction of such a block */

/* The only inline operation of API version 1: *ptr += imm (not atomic). */
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };

/* Whether an instruction callback reads the guest's registers; icount reads none. */
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };

typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
                                           qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op,
                                              void *ptr, uint64_t imm);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn,
                                            qemu_plugin_vcpu_udata_cb_t cb,
                                            enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb,
                                    void *userdata);

size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);

/* Writes to QEMU's log: stderr, or the file of -D, when the emulator runs with -d plugin. */
void qemu_plugin_outs(const char *string);

#endif /* MLCC_QEMU_PLUGIN_API_H */
