import Foundation

/// A POSIX shared memory region (`shm_open`, `/dev/shm`) this process made and maps, for a server on
/// the same host to read a request's tensors from and write the reply's into (Triton's system
/// shared memory extension). Removed when released.
final class SharedMemoryRegion {
    /// The `shm_open` key ("/matanyone-<pid>-<random>-<role>").
    let key: String
    let size: Int
    let base: UnsafeMutableRawPointer

    init(role: String, size: Int) throws {
        precondition(size > 0)
        key = "/matanyone-\(getpid())-\(UInt32.random(in: 0...UInt32.max))-\(role)"
        let fd = shm_open(key, O_CREAT | O_EXCL | O_RDWR, 0o600)
        guard fd >= 0 else { throw SharedMemoryError("shm_open \(key): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        guard ftruncate(fd, off_t(size)) == 0 else {
            let reason = String(cString: strerror(errno))
            shm_unlink(key)
            throw SharedMemoryError("ftruncate \(key) to \(size) bytes: \(reason)")
        }
        guard let mapped = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), mapped != MAP_FAILED else {
            let reason = String(cString: strerror(errno))
            shm_unlink(key)
            throw SharedMemoryError("mmap \(key): \(reason)")
        }
        self.size = size
        base = mapped
    }

    deinit {
        munmap(base, size)
        shm_unlink(key)
    }
}

struct SharedMemoryError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
