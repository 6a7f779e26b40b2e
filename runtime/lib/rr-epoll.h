/* SPDX-License-Identifier: MIT
 *
 * rr-epoll.c: the values epoll_ctl registered, per (epoll fd, fd), so that
 * the log names the fd of each event epoll_wait returns and a replay gives
 * the program its own registered value for that fd (heap addresses differ
 * between a recording and its replay: glibc's malloc arenas).
 */
#ifndef RRC_RR_EPOLL_H
#define RRC_RR_EPOLL_H

#include <stdint.h>

#define RRC_HIDDEN_EP __attribute__((visibility("hidden")))

/* The fd registered with `data` on epfd, or -1 (unknown, or ambiguous). */
int32_t rrc_ep_fd_of(int epfd, uint64_t data) RRC_HIDDEN_EP;
/* The value registered for fd on epfd now: 1 and *data, or 0. */
int rrc_ep_data_of(int epfd, int32_t fd, uint64_t *data) RRC_HIDDEN_EP;

/* Replay: epoll_wait returned these fds (the log's): those registered
 * with EPOLLONESHOT are disabled in the kernel's instance as the recorded
 * call disabled them (rr-epoll.c). */
void rrc_ep_replayed_wait(int epfd, const int32_t *fds, uint32_t n) RRC_HIDDEN_EP;
/* fd was closed: its disarmed registrations are gone with it. */
void rrc_ep_fd_closed(int fd) RRC_HIDDEN_EP;

/* The epoll instance's next number (a return of epoll_wait while
 * recording; call it inside the hook guard with the event). */
uint64_t rrc_ep_order(int epfd) RRC_HIDDEN_EP;

#endif /* RRC_RR_EPOLL_H */
