/**
 * Which extended attributes a squashfs can hold: squashfs stores an xattr
 * name as one of three prefix types (SQUASHFS_XATTR_USER, _TRUSTED,
 * _SECURITY in the kernel's squashfs_fs.h) plus the rest of the name, so
 * `system.*` (POSIX ACLs among them) and every other namespace cannot be
 * written, and mksquashfs drops them without an error.
 * Owns: that rule, so the builder reports what it cannot keep.
 * Must never: accept a name mksquashfs would drop.
 */

/** The xattr namespaces a squashfs stores (each with its trailing dot). */
export const SQUASHFS_XATTR_PREFIXES = ["user.", "trusted.", "security."] as const;

/** True when a squashfs can store the xattr `name` (a byte name). Throws nothing. */
export function squashfsCanStoreXattr(name: string): boolean {
  return SQUASHFS_XATTR_PREFIXES.some((p) => name.startsWith(p) && name.length > p.length);
}
