/* SPDX-License-Identifier: MIT
 *
 * lib-fds.c: which fd numbers are the library's own, so that the
 * application never takes them (issue 16 §2).
 *
 *     int fd = rrc_fd_high(raw);     // moved to LIB_FD_BASE or above, and owned
 *     ...
 *     rrc_libfd_close(fd);           // forgotten, then closed (never close an
 *                                    // owned fd with rrc_sys_close alone)
 *
 * The application's close() of an owned fd fails with EBADF and closes
 * nothing; dup2/dup3 onto one fail with EBADF; close_range and closefrom
 * close around them (wrap-files.c). Every function here is
 * ASYNC-SIGNAL-SAFE (atomics and raw system calls only).
 */
#ifndef RRC_LIB_FDS_H
#define RRC_LIB_FDS_H

#define RRC_HIDDEN_LIBFD __attribute__((visibility("hidden")))

/* Library fds live from here up: applications allocate low numbers. */
#define LIB_FD_BASE 900
/* Numbers from here up are not tracked (a dump refuses fds past
 * RRC_MAX_FDS anyway). */
#define LIB_FD_TRACKED (1 << 16)

/* Moves fd to LIB_FD_BASE or above (closing the old number) and owns it;
 * returns the new number (fd itself if it was high already or the move
 * failed: RLIMIT_NOFILE too low). Negative fds pass through. */
int rrc_fd_high(int fd) RRC_HIDDEN_LIBFD;
/* Owns fd where it is (an fd the restorer or the agent put in place). */
void rrc_libfd_own(int fd) RRC_HIDDEN_LIBFD;
/* No longer the library's: before the library closes it, or hands the
 * number to the application (the accept queue's dup3). */
void rrc_libfd_forget(int fd) RRC_HIDDEN_LIBFD;
/* rrc_libfd_forget, then the close system call; its result. */
long rrc_libfd_close(int fd) RRC_HIDDEN_LIBFD;
/* 1 if fd is the library's. */
int rrc_libfd_is(int fd) RRC_HIDDEN_LIBFD;
/* The first owned fd in [lo, hi], or -1: close_range's gaps. */
int rrc_libfd_next(unsigned lo, unsigned hi) RRC_HIDDEN_LIBFD;
/* The application's call on an owned fd, kept from it: errno EBADF, -1;
 * the first of each kind is said on stderr, naming the fd and the call. */
int rrc_libfd_refuse(const char *call, int fd) RRC_HIDDEN_LIBFD;
/* After a restore, before the library remakes its fds: all forgotten (the
 * image's numbers were the old process's). */
void rrc_libfd_reset(void) RRC_HIDDEN_LIBFD;

#endif
