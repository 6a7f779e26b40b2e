/* SPDX-License-Identifier: MIT
 *
 * ASYNC-SIGNAL-SAFE, freestanding: the restorer blob's assembly.
 * blob_entry must be the first byte of the blob (pie.lds puts .text.entry
 * first): rrc-restore calls the start of the region with the argument
 * area in %rdi, on the blob's main stack.
 */
	.section .text.entry,"ax",@progbits
	.globl blob_entry
	.hidden blob_entry
	.type blob_entry,@function
blob_entry:
	xorl	%ebp, %ebp
	jmp	restorer_main		/* rip-relative; never returns */
	.size blob_entry, .-blob_entry

	.text
/* long blob_clone3(struct clone_args *ca, size_t size, void (*fn)(void *), void *arg)
 * clone3 must be issued from assembly: the child starts on a different
 * stack, so it cannot return through a C frame. The kernel preserves every
 * register but %rax, %rcx, %r11 and %rsp in the child, so %r12/%r13 carry
 * fn and arg across. */
	.globl blob_clone3
	.hidden blob_clone3
	.type blob_clone3,@function
blob_clone3:
	pushq	%r12
	pushq	%r13
	movq	%rdx, %r12
	movq	%rcx, %r13
	movl	$435, %eax		/* __NR_clone3 */
	syscall
	testq	%rax, %rax
	jz	1f
	popq	%r13
	popq	%r12
	ret
1:	xorl	%ebp, %ebp
	andq	$-16, %rsp
	movq	%r13, %rdi
	call	*%r12
	ud2
	.size blob_clone3, .-blob_clone3

/* void blob_resume(const struct rrc_resume_ctx *ctx)
 * Continue a thread where librrc's rrc_ctx_save() saved it: load the
 * callee-saved registers and %rsp, return value 1, jump to the saved %rip.
 * The rest of the thread's state (FPU/AVX, signal mask, altstack, the
 * interrupted registers) comes back from the signal frame on its own stack
 * when the library's park handler returns. */
	.globl blob_resume
	.hidden blob_resume
	.type blob_resume,@function
blob_resume:
	movq	0(%rdi), %rbx
	movq	8(%rdi), %rbp
	movq	16(%rdi), %r12
	movq	24(%rdi), %r13
	movq	32(%rdi), %r14
	movq	40(%rdi), %r15
	movq	48(%rdi), %rsp
	movq	56(%rdi), %rcx
	cld
	movl	$1, %eax
	xorl	%edx, %edx
	xorl	%esi, %esi
	xorl	%edi, %edi
	jmp	*%rcx
	.size blob_resume, .-blob_resume

	.section .note.GNU-stack,"",@progbits
