/* SPDX-License-Identifier: MIT
 *
 * Kernel uapi definitions newer than Debian 12's linux-libc-dev (6.1).
 * This is the one place they are defined; values and layouts are those of
 * the upstream uapi headers (include/uapi/linux/fs.h, userfaultfd.h) of
 * Linux >= 6.11, which rrc requires (PROCMAP_QUERY appeared in 6.11,
 * PAGEMAP_SCAN and UFFD_FEATURE_WP_ASYNC in 6.7).
 */
#ifndef RRC_UAPI_H
#define RRC_UAPI_H

#include <linux/types.h>
#include <linux/ioctl.h>
#include <linux/fs.h>
#include <linux/userfaultfd.h>

/* ---- userfaultfd (include/uapi/linux/userfaultfd.h) ---- */
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

/* ---- madvise (include/uapi/asm-generic/mman-common.h, 5.14) ---- */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* ---- PAGEMAP_SCAN (include/uapi/linux/fs.h, 6.7) ---- */
#ifndef PAGEMAP_SCAN
#define PAGE_IS_WPALLOWED  (1ULL << 0)
#define PAGE_IS_WRITTEN    (1ULL << 1)
#define PAGE_IS_FILE       (1ULL << 2)
#define PAGE_IS_PRESENT    (1ULL << 3)
#define PAGE_IS_SWAPPED    (1ULL << 4)
#define PAGE_IS_PFNZERO    (1ULL << 5)
#define PAGE_IS_HUGE       (1ULL << 6)
#define PAGE_IS_SOFT_DIRTY (1ULL << 7)

struct page_region {
	__u64 start;
	__u64 end;
	__u64 categories;
};

#define PM_SCAN_WP_MATCHING   (1ULL << 0)
#define PM_SCAN_CHECK_WPASYNC (1ULL << 1)

struct pm_scan_arg {
	__u64 size;
	__u64 flags;
	__u64 start;
	__u64 end;
	__u64 walk_end;
	__u64 vec;
	__u64 vec_len;
	__u64 max_pages;
	__u64 category_inverted;
	__u64 category_mask;
	__u64 category_anyof_mask;
	__u64 return_mask;
};

#define PAGEMAP_IOCTL_MAGIC 'f'
#define PAGEMAP_SCAN _IOWR(PAGEMAP_IOCTL_MAGIC, 16, struct pm_scan_arg)
#endif

/* ---- PROCMAP_QUERY (include/uapi/linux/fs.h, 6.11) ---- */
#ifndef PROCMAP_QUERY
#define PROCMAP_QUERY_VMA_READABLE          0x01
#define PROCMAP_QUERY_VMA_WRITABLE          0x02
#define PROCMAP_QUERY_VMA_EXECUTABLE        0x04
#define PROCMAP_QUERY_VMA_SHARED            0x08
#define PROCMAP_QUERY_COVERING_OR_NEXT_VMA  0x10
#define PROCMAP_QUERY_FILE_BACKED_VMA       0x20

struct procmap_query {
	__u64 size;
	__u64 query_flags;
	__u64 query_addr;
	__u64 vma_start;
	__u64 vma_end;
	__u64 vma_flags;
	__u64 vma_page_size;
	__u64 vma_offset;
	__u64 inode;
	__u32 dev_major;
	__u32 dev_minor;
	__u32 vma_name_size;
	__u32 build_id_size;
	__u64 vma_name_addr;
	__u64 build_id_addr;
};

#define PROCFS_IOCTL_MAGIC 'f'
#define PROCMAP_QUERY _IOWR(PROCFS_IOCTL_MAGIC, 17, struct procmap_query)
#endif

/* ---- misc ---- */
#ifndef ARCH_MAP_VDSO_64
#define ARCH_MAP_VDSO_64 0x2003
#endif
#ifndef RSEQ_SIG
#define RSEQ_SIG 0x53053053 /* glibc's x86-64 rseq signature */
#endif

/* ---- socket options (include/uapi/asm-generic/socket.h 5.14, in.h,
 * in6.h, socket.h): read and set again with a socket (struct rrc_sockopts) */
#ifndef SO_BUF_LOCK
#define SO_BUF_LOCK 72
#endif
#ifndef IPV6_FREEBIND
#define IPV6_FREEBIND 78
#endif
#ifndef IPV6_TRANSPARENT
#define IPV6_TRANSPARENT 75
#endif
#ifndef SOCK_SNDBUF_LOCK
#define SOCK_SNDBUF_LOCK 1
#define SOCK_RCVBUF_LOCK 2
#endif

#endif /* RRC_UAPI_H */
