/* SPDX-License-Identifier: MIT
 *
 * sysvipc.c: SysV IPC objects in the process's IPC namespace, which an
 * image does not carry: a dump is refused naming the first one.
 *
 *     if (rrc_sysvipc_check() < 0) ...  // before a dump: error set
 */
#ifndef RRC_LIB_SYSVIPC_H
#define RRC_LIB_SYSVIPC_H

int rrc_sysvipc_check(void) __attribute__((visibility("hidden")));
#endif
