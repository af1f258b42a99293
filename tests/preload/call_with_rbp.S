/* void *call_with_rbp(void *(*fn)(size_t), size_t n, void *rbp): fn(n), called with %rbp = rbp,
 * as code built without frame pointers leaves it (%rbp one more callee-saved register, here
 * holding a pointer into memory that looks like a frame). Its call-frame information is exact,
 * so the walk by CFI sees through it. x86-64 only. */
    .text
    .globl call_with_rbp
    .type call_with_rbp, @function
call_with_rbp:
    .cfi_startproc
    push %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %rbp, 0
    mov %rdx, %rbp
    mov %rdi, %rax
    mov %rsi, %rdi
    call *%rax
    pop %rbp
    .cfi_adjust_cfa_offset -8
    .cfi_restore %rbp
    ret
    .cfi_endproc
    .size call_with_rbp, .-call_with_rbp
    .section .note.GNU-stack,"",@progbits
