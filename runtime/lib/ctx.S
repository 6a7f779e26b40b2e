/* SPDX-License-Identifier: MIT
 *
 * int rrc_ctx_save(struct rrc_resume_ctx *ctx)   -- a setjmp for restore.
 *
 * Stores into *ctx (layout of struct rrc_resume_ctx in rrc/image.h,
 * offsets 0..56): rbx, rbp, r12, r13, r14, r15, rsp, rip, where rsp is the
 * stack pointer as it is after this call returns (the caller's rsp) and rip
 * is the return address. Returns 0.
 *
 * THE RESUME CONVENTION (the restorer's side, rrc-restore's pie code):
 * to resume a thread at a saved context, with the thread's memory, FS base,
 * rseq, robust list and clear_child_tid already in place and all signals
 * blocked, load rbx, rbp, r12-r15 and rsp from the record, set eax = 1
 * and jump to rip. The thread then sees rrc_ctx_save() return 1.
 * Caller-saved registers are undefined after the jump (as after any call);
 * the direction flag must be clear, and the x87/SSE control words should be
 * the ABI defaults (the park handler's rt_sigreturn later restores the
 * interrupted FPU state of application threads in full).
 * ASYNC-SIGNAL-SAFE.
 */
	.text
	.globl	rrc_ctx_save
	.hidden	rrc_ctx_save
	.type	rrc_ctx_save, @function
rrc_ctx_save:
	.cfi_startproc
	movq	%rbx, 0(%rdi)
	movq	%rbp, 8(%rdi)
	movq	%r12, 16(%rdi)
	movq	%r13, 24(%rdi)
	movq	%r14, 32(%rdi)
	movq	%r15, 40(%rdi)
	leaq	8(%rsp), %rax		/* rsp after our ret */
	movq	%rax, 48(%rdi)
	movq	(%rsp), %rax		/* return address */
	movq	%rax, 56(%rdi)
	xorl	%eax, %eax
	ret
	.cfi_endproc
	.size	rrc_ctx_save, .-rrc_ctx_save

	.section .note.GNU-stack,"",@progbits

/*
 * void rrc_call_on_stack(void *stack_top, void (*fn)(void))  -- noreturn
 *
 * Switches to another stack and calls fn, which must not return. The
 * snapshot child uses it to leave the control thread's stack, which it is
 * about to copy into the image and so must not keep changing.
 * ASYNC-SIGNAL-SAFE.
 */
	.text
	.globl	rrc_call_on_stack
	.hidden	rrc_call_on_stack
	.type	rrc_call_on_stack, @function
rrc_call_on_stack:
	.cfi_startproc
	andq	$-16, %rdi
	movq	%rdi, %rsp
	xorl	%ebp, %ebp
	callq	*%rsi
	ud2
	.cfi_endproc
	.size	rrc_call_on_stack, .-rrc_call_on_stack
	.section .note.GNU-stack,"",@progbits

/*
 * long rrc_clone_on_stack(unsigned long flags, void *stack_top, void (*fn)(void))
 *
 * clone(flags) whose child starts on its own stack in fn, which must not
 * return (it ends with exit). The parent gets the child's pid or -errno.
 * With CLONE_VM the child shares this memory, so it cannot go on on the
 * caller's stack as a fork child does: fn's address travels on the new
 * stack, the only memory the child may use before its first call.
 * ASYNC-SIGNAL-SAFE.
 */
	.text
	.globl	rrc_clone_on_stack
	.hidden	rrc_clone_on_stack
	.type	rrc_clone_on_stack, @function
rrc_clone_on_stack:
	.cfi_startproc
	andq	$-16, %rsi
	subq	$16, %rsi
	movq	%rdx, (%rsi)		/* fn, popped by the child */
	movl	$56, %eax		/* SYS_clone: flags, stack, ptid, ctid, tls */
	xorl	%edx, %edx
	xorl	%r10d, %r10d
	xorl	%r8d, %r8d
	syscall
	testq	%rax, %rax
	jnz	1f
	/* the child, on the new stack */
	popq	%rax
	andq	$-16, %rsp
	xorl	%ebp, %ebp
	callq	*%rax
	ud2
1:	ret
	.cfi_endproc
	.size	rrc_clone_on_stack, .-rrc_clone_on_stack
	.section .note.GNU-stack,"",@progbits
