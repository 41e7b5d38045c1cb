"""
Runs a command with socket(AF_NETLINK) failing with EAFNOSUPPORT, as
systemd's RestrictAddressFamilies= without AF_NETLINK makes it fail (a
seccomp filter installed with prctl, no systemd needed; x86_64 only).
Usage: /usr/bin/python3 test/support/noNetlink.py COMMAND [ARGS...]
Used by test/integration/netlink-restricted.test.ts.
"""
import ctypes, struct, sys, os
AUDIT_ARCH_X86_64 = 0xC000003E
def ins(code, jt, jf, k): return struct.pack("HBBI", code, jt, jf, k)
LD_W_ABS, JEQ_K, RET_K = 0x20, 0x15, 0x06
prog = b"".join([
  ins(LD_W_ABS, 0, 0, 4),              # arch
  ins(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
  ins(RET_K, 0, 0, 0x7fff0000),        # other arch: allow
  ins(LD_W_ABS, 0, 0, 0),              # nr
  ins(JEQ_K, 0, 3, 41),                # socket
  ins(LD_W_ABS, 0, 0, 16),             # args[0] low 32 bits
  ins(JEQ_K, 0, 1, 16),                # AF_NETLINK
  ins(RET_K, 0, 0, 0x00050000 | 97),   # SECCOMP_RET_ERRNO | EAFNOSUPPORT
  ins(RET_K, 0, 0, 0x7fff0000),        # allow
])
n = len(prog) // 8
buf = ctypes.create_string_buffer(prog)
class SockFprog(ctypes.Structure): _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
fp = SockFprog(n, ctypes.cast(buf, ctypes.c_void_p))
libc = ctypes.CDLL(None, use_errno=True)
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0: sys.exit("prctl no_new_privs: %d" % ctypes.get_errno())
if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fp), 0, 0) != 0: sys.exit("prctl seccomp: %d" % ctypes.get_errno())
os.execvp(sys.argv[1], sys.argv[1:])
