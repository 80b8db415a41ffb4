import Foundation

/// A POSIX shared memory region (`shm_open`, `/dev/shm`) this process made and maps, for a server on
/// the same host to read a request's tensors from and write the reply's into (Triton's system
/// shared memory extension). Removed when released.
final class SharedMemoryRegion {
    /// The `shm_open` key ("/matanyone-<pid namespace>-<pid>-<random>-<role>").
    let key: String
    let size: Int
    let base: UnsafeMutableRawPointer

    init(role: String, size: Int) throws {
        precondition(size > 0)
        _ = SharedMemoryRegion.staleRemoved
        key = "/\(SharedMemoryRegion.prefix)\(SharedMemoryRegion.namespace)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))-\(role)"
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

    static let prefix = "matanyone-"

    /// This process's pid namespace (the inode of /proc/self/ns/pid), in every key: a pid means
    /// something only inside its namespace, and containers may share a /dev/shm. "0" when unknown.
    static let namespace: String = {
        guard let link = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/pid"),
              let open = link.firstIndex(of: "["), let close = link.lastIndex(of: "]"), open < close else { return "0" }
        let inode = link[link.index(after: open)..<close]
        return !inode.isEmpty && inode.allSatisfy(\.isASCII) && inode.allSatisfy(\.isNumber) ? String(inode) : "0"
    }()

    /// Whether process `pid` (of this namespace) runs: only "no such process" says it does not.
    static func runs(_ pid: pid_t) -> Bool { kill(pid, 0) == 0 || errno != ESRCH }

    /// The regions a killed process left (it could not remove its own), removed once per process
    /// before its first region: they hold memory (tmpfs) until the machine restarts.
    static let staleRemoved: [String] = removeStale(in: "/dev/shm", namespace: namespace, runs: runs)

    /// Removes from `folder` the regions named by this code (`matanyone-<namespace>-<pid>-<n>-in|out`)
    /// in `namespace` whose process no longer runs; nothing else (another namespace's, a live
    /// process's, a file of another form), and nothing when the namespace is not known. Returns the
    /// names removed.
    static func removeStale(in folder: String, namespace: String, runs: (pid_t) -> Bool) -> [String] {
        guard namespace != "0", let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return [] }
        let ours = prefix + namespace + "-"
        var removed: [String] = []
        for name in names.sorted() where name.hasPrefix(ours) {
            let fields = name.dropFirst(ours.count).split(separator: "-", omittingEmptySubsequences: false)
            guard fields.count == 3, let pid = pid_t(fields[0]), pid > 0, pid != getpid(), UInt32(fields[1]) != nil,
                  fields[2] == "in" || fields[2] == "out", !runs(pid) else { continue }
            if unlink(folder + "/" + name) == 0 { removed.append(name) }
        }
        return removed
    }
}

struct SharedMemoryError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
