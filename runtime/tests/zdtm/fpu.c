/* zdtm: FPU/SSE/AVX registers held live across the dump, and TLS values.
 *
 * Each of 4 worker threads loads ymm0..ymm13 with its own pattern, an
 * x87 control word and three x87 stack values, a non-default MXCSR
 * (rounding mode, DAZ/FTZ) and r9, r10, r12..r15, then spins in an asm
 * loop that adds 1.0 to the four lanes of ymm15 and 1 to r8 until the main
 * thread sets the stop flag. The registers are never spilled to memory:
 * across the dump they exist only in the signal frame that rrc's park
 * handler returns through, so a restore that loses or mixes up extended
 * state (or FPU state of another thread) shows up. After the loop, every
 * register must hold what was loaded, and ymm15's lanes must equal r8
 * (both counted the same iterations).
 *
 * TLS: each thread (the main one too) has __thread values (initialised
 * and zero-initialised ones) and must still see them at the same
 * addresses, with the same FS base and pthread_self().
 */
#include <pthread.h>
#include <stddef.h>
#include <asm/prctl.h>
#include <sys/syscall.h>
#include "zdtm.h"

#define NW 4

struct fpu_block {
	uint8_t  ymm[16][32];  /*   0 */
	uint32_t mxcsr;        /* 512 */
	uint32_t pad;          /* 516 */
	double   x87[3];       /* 520 */
	uint64_t gpr[8];       /* 544: r8 r9 r10 r12 r13 r14 r15 - */
	uint32_t mxcsr_default;/* 608 */
	uint16_t x87_cw;       /* 612 */
	uint16_t pad2;
} __attribute__((aligned(32)));
_Static_assert(offsetof(struct fpu_block, mxcsr) == 512, "layout");
_Static_assert(offsetof(struct fpu_block, x87) == 520, "layout");
_Static_assert(offsetof(struct fpu_block, gpr) == 544, "layout");
_Static_assert(offsetof(struct fpu_block, mxcsr_default) == 608, "layout");
_Static_assert(offsetof(struct fpu_block, x87_cw) == 612, "layout");

static volatile int stop;
static char werr[NW + 1][256];

static __thread uint64_t tls_val;                 /* .tbss */
static __thread int tls_index = -1;               /* .tdata */
static __thread uint8_t tls_buf[512];

static void spin(const struct fpu_block *in, struct fpu_block *out)
{
	__asm__ volatile(
		"vmovdqu   0(%%rdi), %%ymm0\n\t"  "vmovdqu  32(%%rdi), %%ymm1\n\t"
		"vmovdqu  64(%%rdi), %%ymm2\n\t"  "vmovdqu  96(%%rdi), %%ymm3\n\t"
		"vmovdqu 128(%%rdi), %%ymm4\n\t"  "vmovdqu 160(%%rdi), %%ymm5\n\t"
		"vmovdqu 192(%%rdi), %%ymm6\n\t"  "vmovdqu 224(%%rdi), %%ymm7\n\t"
		"vmovdqu 256(%%rdi), %%ymm8\n\t"  "vmovdqu 288(%%rdi), %%ymm9\n\t"
		"vmovdqu 320(%%rdi), %%ymm10\n\t" "vmovdqu 352(%%rdi), %%ymm11\n\t"
		"vmovdqu 384(%%rdi), %%ymm12\n\t" "vmovdqu 416(%%rdi), %%ymm13\n\t"
		"vmovdqu 448(%%rdi), %%ymm14\n\t" /* four 1.0 */
		"vxorpd %%ymm15, %%ymm15, %%ymm15\n\t"
		"ldmxcsr 512(%%rdi)\n\t"
		"fninit\n\t"
		"fldcw 612(%%rdi)\n\t"
		"fldl 520(%%rdi)\n\t" "fldl 528(%%rdi)\n\t" "fldl 536(%%rdi)\n\t"
		"movq 552(%%rdi), %%r9\n\t"  "movq 560(%%rdi), %%r10\n\t"
		"movq 568(%%rdi), %%r12\n\t" "movq 576(%%rdi), %%r13\n\t"
		"movq 584(%%rdi), %%r14\n\t" "movq 592(%%rdi), %%r15\n\t"
		"xorl %%r8d, %%r8d\n"
		"1:\n\t"
		"vaddpd %%ymm14, %%ymm15, %%ymm15\n\t"
		"incq %%r8\n\t"
		"pause\n\t"
		"cmpl $0, (%%rdx)\n\t"
		"je 1b\n\t"
		"vmovdqu %%ymm0,    0(%%rsi)\n\t" "vmovdqu %%ymm1,   32(%%rsi)\n\t"
		"vmovdqu %%ymm2,   64(%%rsi)\n\t" "vmovdqu %%ymm3,   96(%%rsi)\n\t"
		"vmovdqu %%ymm4,  128(%%rsi)\n\t" "vmovdqu %%ymm5,  160(%%rsi)\n\t"
		"vmovdqu %%ymm6,  192(%%rsi)\n\t" "vmovdqu %%ymm7,  224(%%rsi)\n\t"
		"vmovdqu %%ymm8,  256(%%rsi)\n\t" "vmovdqu %%ymm9,  288(%%rsi)\n\t"
		"vmovdqu %%ymm10, 320(%%rsi)\n\t" "vmovdqu %%ymm11, 352(%%rsi)\n\t"
		"vmovdqu %%ymm12, 384(%%rsi)\n\t" "vmovdqu %%ymm13, 416(%%rsi)\n\t"
		"vmovdqu %%ymm14, 448(%%rsi)\n\t" "vmovdqu %%ymm15, 480(%%rsi)\n\t"
		"stmxcsr 512(%%rsi)\n\t"
		"fnstcw 612(%%rsi)\n\t"
		"fstpl 536(%%rsi)\n\t" "fstpl 528(%%rsi)\n\t" "fstpl 520(%%rsi)\n\t"
		"movq %%r8,  544(%%rsi)\n\t" "movq %%r9,  552(%%rsi)\n\t"
		"movq %%r10, 560(%%rsi)\n\t" "movq %%r12, 568(%%rsi)\n\t"
		"movq %%r13, 576(%%rsi)\n\t" "movq %%r14, 584(%%rsi)\n\t"
		"movq %%r15, 592(%%rsi)\n\t"
		"ldmxcsr 608(%%rdi)\n\t"
		"fninit\n\t"
		"vzeroupper\n\t"
		:
		: "D"(in), "S"(out), "d"(&stop)
		: "memory", "cc", "r8", "r9", "r10", "r12", "r13", "r14", "r15",
		  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
		  "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15",
		  "st", "st(1)", "st(2)", "st(3)", "st(4)", "st(5)", "st(6)", "st(7)");
}

static uint64_t fs_base(void)
{
	uint64_t fs = 0;
	syscall(SYS_arch_prctl, ARCH_GET_FS, &fs);
	return fs;
}

struct tls_record { uint64_t *val_addr; uint8_t *buf_addr; uint64_t fs; pthread_t self; pid_t tid; };

static void tls_setup(int t, struct tls_record *rec)
{
	tls_index = t;
	tls_val = zdtm_pattern(0x715, (uint64_t)t, 0);
	zdtm_fill(tls_buf, sizeof(tls_buf), 0x715b, (uint64_t)t);
	rec->val_addr = &tls_val;
	rec->buf_addr = tls_buf;
	rec->fs = fs_base();
	rec->self = pthread_self();
	rec->tid = zdtm_gettid();
}

static int tls_check(int t, const struct tls_record *rec, char *err, size_t len)
{
	if (tls_index != t)
		return snprintf(err, len, "TLS index is %d", tls_index);
	if (tls_val != zdtm_pattern(0x715, (uint64_t)t, 0))
		return snprintf(err, len, "TLS value %#lx", (unsigned long)tls_val);
	if (zdtm_cmp_fill(tls_buf, sizeof(tls_buf), 0x715b, (uint64_t)t) >= 0)
		return snprintf(err, len, "TLS buffer changed");
	if (&tls_val != rec->val_addr || tls_buf != rec->buf_addr)
		return snprintf(err, len, "TLS moved: %p, was %p", (void *)&tls_val, (void *)rec->val_addr);
	if (fs_base() != rec->fs)
		return snprintf(err, len, "FS base %#lx, was %#lx", (unsigned long)fs_base(), (unsigned long)rec->fs);
	if (!pthread_equal(pthread_self(), rec->self))
		return snprintf(err, len, "pthread_self changed");
	if (zdtm_gettid() != rec->tid)
		return snprintf(err, len, "TID %d, was %d", zdtm_gettid(), rec->tid);
	return 0;
}

static void *worker(void *arg)
{
	int t = (int)(long)arg;
	struct tls_record rec;
	tls_setup(t, &rec);
	static struct fpu_block in[NW], out[NW];
	struct fpu_block *I = &in[t], *O = &out[t];
	memset(I, 0, sizeof(*I));
	for (int r = 0; r < 14; r++)
		zdtm_fill(I->ymm[r], 32, 0xa7a7, (uint64_t)(t * 16 + r));
	for (int l = 0; l < 4; l++)
		((double *)I->ymm[14])[l] = 1.0;
	I->mxcsr = (t % 2) ? 0x3fc0 /* round down, DAZ, masks */ : 0xff80 /* toward zero, FTZ */;
	I->mxcsr_default = 0x1f80;
	I->x87_cw = (t % 2) ? 0x027f /* 53-bit precision */ : 0x0c7f /* round toward zero */;
	I->x87[0] = 1.25 + t;
	I->x87[1] = 3.141592653589793 * (t + 1);
	I->x87[2] = -7.5e10 / (t + 1);
	for (int g = 1; g < 7; g++)
		I->gpr[g] = zdtm_pattern(0x6e6e, (uint64_t)t, (uint64_t)g);

	spin(I, O);

	char *e = werr[t];
	size_t el = sizeof(werr[t]);
	if (zdtm_corrupt && t == 1)
		O->ymm[7][13] ^= 1;
	for (int r = 0; r < 14; r++)
		if (memcmp(I->ymm[r], O->ymm[r], 32) != 0) {
			snprintf(e, el, "thread %d: ymm%d differs (upper half %s)", t, r,
				 memcmp(I->ymm[r] + 16, O->ymm[r] + 16, 16) ? "changed" : "intact");
			return NULL;
		}
	const double *acc = (const double *)O->ymm[15];
	uint64_t n = O->gpr[0];
	for (int l = 0; l < 4; l++)
		if (acc[l] != (double)n) {
			snprintf(e, el, "thread %d: ymm15 lane %d = %.0f but r8 counted %lu iterations", t, l,
				 acc[l], (unsigned long)n);
			return NULL;
		}
	if (O->mxcsr != I->mxcsr)
		snprintf(e, el, "thread %d: MXCSR %#x, loaded %#x", t, O->mxcsr, I->mxcsr);
	else if (O->x87_cw != I->x87_cw)
		snprintf(e, el, "thread %d: x87 control word %#x, loaded %#x", t, O->x87_cw, I->x87_cw);
	else if (memcmp(O->x87, I->x87, sizeof(I->x87)) != 0)
		snprintf(e, el, "thread %d: x87 stack %g %g %g, loaded %g %g %g", t, O->x87[0], O->x87[1],
			 O->x87[2], I->x87[0], I->x87[1], I->x87[2]);
	else {
		for (int g = 1; g < 7; g++)
			if (O->gpr[g] != I->gpr[g]) {
				snprintf(e, el, "thread %d: general register #%d %#lx, loaded %#lx", t, g,
					 (unsigned long)O->gpr[g], (unsigned long)I->gpr[g]);
				return NULL;
			}
		char te[200] = "";
		if (tls_check(t, &rec, te, sizeof(te)))
			snprintf(e, el, "thread %d: %s", t, te);
		else
			printf("fpu: thread %d spun %lu iterations\n", t, (unsigned long)n);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	zdtm_init(argc, argv);
	struct tls_record mrec;
	tls_setup(NW, &mrec);
	pthread_t th[NW];
	for (int t = 0; t < NW; t++)
		zdtm_check(pthread_create(&th[t], NULL, worker, (void *)(long)t) == 0, "pthread_create");
	zdtm_sleep_ms(50); /* let every worker enter its loop */
	zdtm_ready();
	zdtm_wait_verify();
	stop = 1;
	for (int t = 0; t < NW; t++)
		if (zdtm_join(th[t], NULL, 5000) != 0)
			zdtm_fail("worker %d did not leave its loop within 5 s", t);
	for (int t = 0; t < NW; t++)
		if (werr[t][0])
			zdtm_fail("%s", werr[t]);
	if (tls_check(NW, &mrec, werr[NW], sizeof(werr[NW])))
		zdtm_fail("main thread: %s", werr[NW]);
	zdtm_pass();
}
