/* A C program whose function names only a debug file can give once it is
 * stripped: static functions (not in .dynsym). It prints its pid and one
 * address inside each function (root first, as a stack would list them),
 * then waits for stdin to close so that it can be symbolized alive. */
#include <stdio.h>
#include <unistd.h>

#define CODE(f) ((unsigned long)(void *)&f + 4)

__attribute__((noinline)) static int wcstrip_inner(int x) { return x * 3 + 1; }
__attribute__((noinline)) static int wcstrip_middle(int x) { return wcstrip_inner(x) + 2; }
__attribute__((noinline)) static int wcstrip_outer(int x) { return wcstrip_middle(x) * 2; }

int main(void)
{
    printf("pid %d\n", (int)getpid());
    printf("chain %lx %lx %lx %lx\n", CODE(main), CODE(wcstrip_outer), CODE(wcstrip_middle), CODE(wcstrip_inner));
    printf("result %d\n", wcstrip_outer(4));
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {
    }
    return 0;
}
