/* SPDX-License-Identifier: MIT
 *
 * mqueue.c: POSIX message queues (RRC_FD_MQUEUE): told by their file
 * system, captured in the pause with their limits and, for the first fd
 * of each queue, their messages.
 *
 *     if (rrc_is_mqueue(fd, link)) kind = RRC_FD_MQUEUE;
 *     r = rrc_capture_mqueue(f, fd);   // in the pause: 0, or -1 with the error set
 */
#ifndef RRC_LIB_MQUEUE_H
#define RRC_LIB_MQUEUE_H
#include "rrc/image.h"

int rrc_is_mqueue(int fd, const char *link) __attribute__((visibility("hidden")));
int rrc_capture_mqueue(struct rrc_fd *f, int fd) __attribute__((visibility("hidden")));
#endif
