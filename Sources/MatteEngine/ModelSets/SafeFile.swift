import Foundation
import Glibc

/// What is wrong with a file the engine was asked to read.
enum FileProblem: Error, Equatable, CustomStringConvertible {
    case missing                          // ENOENT (or a dangling symlink)
    case permissionDenied                 // EACCES/EPERM on stat/open/read
    case notRegular(kind: String)         // "a directory", "a FIFO", "a socket", ...
    case tooLarge(size: Int, limit: Int)
    case outsideFolder(resolved: String, folder: String)
    case notSharedLibrary(reason: String)
    case ioError(errno: Int32, message: String)

    /// Short text meant to follow the path, e.g. "<path> is a FIFO, not a regular file".
    var description: String {
        switch self {
        case .missing: return "does not exist"
        case .permissionDenied: return "cannot be read: permission denied"
        case let .notRegular(kind): return "is \(kind), not a regular file"
        case let .tooLarge(size, limit): return "is larger than the \(byteCount(limit)) limit (\(byteCount(size)))"
        case let .outsideFolder(resolved, folder): return "resolves to \(resolved), outside the folder \(folder)"
        case let .notSharedLibrary(reason): return "is not a loadable shared library: \(reason)"
        case let .ioError(_, message): return "cannot be read: \(message)"
        }
    }

    init(errno code: Int32) {
        switch code {
        case ENOENT, ENOTDIR: self = .missing   // ENOTDIR: a path component is a file, so the path cannot exist
        case EACCES, EPERM: self = .permissionDenied
        default: self = .ioError(errno: code, message: String(cString: strerror(code)))
        }
    }
}

/// Exact binary units for configured limits ("64 MiB"), one decimal otherwise ("3.0 GB").
private func byteCount(_ n: Int) -> String {
    for (unit, name) in [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] where n >= unit && n % unit == 0 {
        return "\(n / unit) \(name)"
    }
    if n < 1000 { return "\(n) bytes" }
    let (scale, name) = n >= 1_000_000_000 ? (1e9, "GB") : n >= 1_000_000 ? (1e6, "MB") : (1e3, "kB")
    return "\((Double(n) / scale * 10).rounded() / 10) \(name)"
}

enum SafeFile {
    /// stat (following symlinks); throws unless a regular file; returns its size. maxBytes nil = no limit.
    static func checkRegular(_ path: String, maxBytes: Int? = nil) throws -> Int {
        try rejectNUL(path)
        var info = stat()
        guard stat(path, &info) == 0 else { throw FileProblem(errno: errno) }
        return try regularSize(info, maxBytes: maxBytes)
    }

    /// Reads a whole small file. The size and type checks use the open descriptor, so a file swapped
    /// between the check and the read cannot slip through.
    static func read(_ path: String, maxBytes: Int) throws -> [UInt8] {
        let (fd, _, size) = try openRegular(path, maxBytes: maxBytes)
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: size)
        let count = try bytes.withUnsafeMutableBytes { try readFully(fd, into: $0) }
        if count < size { bytes.removeSubrange(count...) }   // the file shrank meanwhile
        return bytes
    }

    /// `relative` (a file name from a manifest) resolved inside `folder`, symlinks included.
    static func resolve(_ relative: String, inside folder: String) throws -> String {
        try rejectNUL(relative)
        try rejectNUL(folder)
        guard !relative.hasPrefix("/") else { throw FileProblem.outsideFolder(resolved: relative, folder: folder) }
        // Lexical pass first, so "../x" is refused even when x does not exist.
        var depth = 0
        for part in relative.split(separator: "/") where part != "." {
            depth += part == ".." ? -1 : 1
            if depth < 0 { throw FileProblem.outsideFolder(resolved: folder + "/" + relative, folder: folder) }
        }
        guard depth > 0 else {
            throw FileProblem.ioError(errno: EINVAL, message: relative.isEmpty ? "empty file name"
                                      : "\"\(relative)\" names the folder itself, not a file in it")
        }
        let root = try realPath(Array(folder.utf8))
        let resolved = try realPath(root + [UInt8(ascii: "/")] + Array(relative.utf8))
        // Compare bytes, not Strings: String equality is Unicode-canonical, and paths need not be UTF-8.
        let prefix = root == [UInt8(ascii: "/")] ? root : root + [UInt8(ascii: "/")]
        guard resolved.count > prefix.count, resolved.starts(with: prefix) else {
            throw FileProblem.outsideFolder(resolved: String(decoding: resolved, as: UTF8.self),
                                            folder: String(decoding: root, as: UTF8.self))
        }
        return String(decoding: resolved, as: UTF8.self)
    }

    /// Lowercase hex SHA-256 of a file, streamed in 1 MiB chunks and cached per file identity, so a
    /// second start of the same model set in one process does not hash gigabytes again.
    static func sha256Hex(ofFile path: String) throws -> String {
        let (fd, info, _) = try openRegular(path, maxBytes: nil)
        defer { close(fd) }
        let key = FileIdentity(info)
        if let known = hashLock.withLock({ hashCache[key] }) { return known }
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)
        defer { chunk.deallocate() }
        var hasher = SHA256()
        while true {
            let count = try readFully(fd, into: chunk)
            hasher.update(UnsafeRawBufferPointer(rebasing: chunk[..<count]))
            if count < chunk.count { break }
        }
        let digits = Array("0123456789abcdef".utf8)
        let hex = String(decoding: hasher.finish().flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] },
                         as: UTF8.self)
        // Remember it only if the file did not change while it was read.
        var after = stat()
        if fstat(fd, &after) == 0, FileIdentity(after) == key {
            hashLock.withLock {
                if hashCache.count >= 1024 { hashCache.removeAll() }
                hashCache[key] = hex
            }
        }
        return hex
    }

    /// SHA-256 of bytes in memory.
    static func sha256(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        var hasher = SHA256()
        hasher.update(bytes)
        return hasher.finish()
    }

    /// Before dlopen: a regular, complete, 64-bit little-endian ELF file for this machine. dlopen of a
    /// truncated or foreign file can crash or give a cryptic message; this reads only the headers.
    static func checkSharedLibrary(_ path: String) throws {
        let (fd, _, size) = try openRegular(path, maxBytes: nil)
        defer { close(fd) }
        func refuse(_ reason: String) -> FileProblem { .notSharedLibrary(reason: reason) }
        var header = [UInt8](repeating: 0, count: 64)
        let got = try header.withUnsafeMutableBytes { try readFully(fd, into: $0, at: 0) }
        guard got >= 4, header.starts(with: [0x7f, 0x45, 0x4c, 0x46]) else { throw refuse("not an ELF file") }
        guard got == 64 else { throw refuse("truncated: the file is \(size) bytes but its ELF header needs 64") }
        switch header[4] {
        case 2: break
        case 1: throw refuse("a 32-bit ELF file")
        default: throw refuse("an ELF file of unknown class \(header[4])")
        }
        guard header[5] == 1 else { throw refuse(header[5] == 2 ? "a big-endian ELF file" : "an ELF file of unknown byte order") }
        switch littleEndian(header, at: 16, width: 2) {
        case 2, 3: break   // ET_EXEC, ET_DYN (shared libraries and PIE executables)
        case 1: throw refuse("a relocatable object file (.o)")
        case 4: throw refuse("a core dump")
        case let type: throw refuse("ELF type \(type) cannot be loaded")
        }
        let machine = littleEndian(header, at: 18, width: 2)
        if let host = hostMachine, machine != host.number {
            let name = machineNames[machine].map { " (\($0))" } ?? ""
            throw refuse("built for machine \(machine)\(name), this is \(host.name)")
        }
        let fileSize = UInt64(size)
        // Header fields are hostile until checked: every end offset is computed with overflow checks.
        func requireEnd(_ start: UInt64, _ count: UInt64, _ entrySize: UInt64, _ what: String) throws {
            let (length, overflowA) = count.multipliedReportingOverflow(by: entrySize)
            let (end, overflowB) = start.addingReportingOverflow(length)
            if overflowA || overflowB { throw refuse("corrupt: \(what) more than 2^64 bytes") }
            if end > fileSize { throw refuse("truncated: the file is \(size) bytes but \(what) \(end)") }
        }
        let programOffset = littleEndian(header, at: 32, width: 8)
        let sectionOffset = littleEndian(header, at: 40, width: 8)
        let programEntrySize = littleEndian(header, at: 54, width: 2)
        let programCount = littleEndian(header, at: 56, width: 2)
        guard programCount > 0 else { throw refuse("it has no program headers") }
        guard programEntrySize == 56 else { throw refuse("program headers of \(programEntrySize) bytes, not 56") }
        try requireEnd(programOffset, programCount, 56, "its program headers need")
        // At most 65535 × 56 bytes (3.5 MiB), and the check above bounds it by the file size too.
        var table = [UInt8](repeating: 0, count: Int(programCount) * 56)
        let tableBytes = try table.withUnsafeMutableBytes { try readFully(fd, into: $0, at: Int(programOffset)) }
        guard tableBytes == table.count else { throw refuse("truncated while it was being read") }
        var loadCount = 0
        for index in 0 ..< Int(programCount) where littleEndian(table, at: index * 56, width: 4) == 1 {  // PT_LOAD
            loadCount += 1
            try requireEnd(littleEndian(table, at: index * 56 + 8, width: 8),
                           littleEndian(table, at: index * 56 + 32, width: 8), 1, "segment \(index) needs")
        }
        guard loadCount > 0 else { throw refuse("it has no loadable segments") }
        if sectionOffset != 0 {
            try requireEnd(sectionOffset, littleEndian(header, at: 60, width: 2),
                           littleEndian(header, at: 58, width: 2), "its section headers need")
        }
    }

    // MARK: - Helpers

    #if arch(x86_64)
    private static let hostMachine: (number: UInt64, name: String)? = (62, "x86-64")
    #elseif arch(arm64)
    private static let hostMachine: (number: UInt64, name: String)? = (183, "aarch64")
    #else
    private static let hostMachine: (number: UInt64, name: String)? = nil
    #endif
    private static let machineNames: [UInt64: String] = [3: "i386", 40: "32-bit ARM", 62: "x86-64", 183: "aarch64"]

    /// A C call would silently cut the path at an embedded NUL and act on a different file.
    private static func rejectNUL(_ path: String) throws {
        if path.utf8.contains(0) { throw FileProblem.ioError(errno: EINVAL, message: "the path contains a NUL byte") }
    }

    private static func regularSize(_ info: stat, maxBytes: Int?) throws -> Int {
        let kinds: [mode_t: String] = [0o040000: "a directory", 0o010000: "a FIFO", 0o140000: "a socket",
                                       0o020000: "a character device", 0o060000: "a block device"]
        let type = info.st_mode & 0o170000
        guard type == 0o100000 else { throw FileProblem.notRegular(kind: kinds[type] ?? "a special file") }
        let size = Int(max(info.st_size, 0))
        if let limit = maxBytes, size > limit { throw FileProblem.tooLarge(size: size, limit: limit) }
        return size
    }

    /// Refuses special files before opening them at all (opening a device can have side effects), then
    /// opens without blocking on a FIFO or taking a terminal and checks the descriptor itself.
    private static func openRegular(_ path: String, maxBytes: Int?) throws -> (fd: Int32, info: stat, size: Int) {
        _ = try checkRegular(path, maxBytes: maxBytes)
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        guard fd >= 0 else { throw FileProblem(errno: errno) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { let code = errno; close(fd); throw FileProblem(errno: code) }
        do { return (fd, info, try regularSize(info, maxBytes: maxBytes)) } catch { close(fd); throw error }
    }

    /// Fills `buffer` unless the file ends first; returns the byte count. Retries EINTR and short reads.
    private static func readFully(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int? = nil) throws -> Int {
        guard let base = buffer.baseAddress else { return 0 }
        var done = 0
        while done < buffer.count {
            let count = offset.map { pread(fd, base + done, buffer.count - done, off_t($0 + done)) }
                ?? Glibc.read(fd, base + done, buffer.count - done)
            if count > 0 { done += count } else if count == 0 { break } else if errno != EINTR { throw FileProblem(errno: errno) }
        }
        return done
    }

    /// Bytes in and out: a resolved folder need not be valid UTF-8.
    private static func realPath(_ path: [UInt8]) throws -> [UInt8] {
        let resolved = (path + [0]).withUnsafeBytes { realpath($0.baseAddress?.assumingMemoryBound(to: CChar.self), nil) }
        guard let pointer = resolved else { throw FileProblem(errno: errno) }
        defer { free(pointer) }
        return Array(UnsafeRawBufferPointer(start: pointer, count: strlen(pointer)))
    }

    private static func littleEndian(_ bytes: [UInt8], at offset: Int, width: Int) -> UInt64 {
        (0 ..< width).reversed().reduce(0) { $0 << 8 | UInt64(bytes[offset + $1]) }
    }

    /// Same device, inode, size and modification time (to the nanosecond): same content, hash reused.
    private struct FileIdentity: Hashable {
        let device, inode: UInt64, size: Int64, seconds: Int, nanoseconds: Int
        init(_ info: stat) {
            (device, inode, size) = (UInt64(info.st_dev), UInt64(info.st_ino), Int64(info.st_size))
            (seconds, nanoseconds) = (Int(info.st_mtim.tv_sec), Int(info.st_mtim.tv_nsec))
        }
    }

    /// Shared by all elements of the process, guarded by `hashLock`; bounded, not an LRU: model sets are few.
    private static let hashLock = NSLock()
    nonisolated(unsafe) private static var hashCache: [FileIdentity: String] = [:]
}

extension SafeFile {
    /// Streaming SHA-256 after FIPS 180-4.
    struct SHA256 {
        private var state: (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32) =
            (0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19)
        private var pending: [UInt8] = []   // fewer than 64 bytes waiting for a full block
        private var length: UInt64 = 0

        mutating func update(_ data: UnsafeRawBufferPointer) {
            guard var next = data.baseAddress else { return }
            var remaining = data.count
            length &+= UInt64(remaining)
            if !pending.isEmpty {
                let take = min(64 - pending.count, remaining)
                pending.append(contentsOf: UnsafeRawBufferPointer(start: next, count: take))
                (next, remaining) = (next + take, remaining - take)
                guard pending.count == 64 else { return }
                let block = pending
                block.withUnsafeBytes { if let base = $0.baseAddress { Self.compress(&state, base, blocks: 1) } }
                pending.removeAll(keepingCapacity: true)
            }
            let blocks = remaining / 64
            if blocks > 0 { Self.compress(&state, next, blocks: blocks) }
            pending.append(contentsOf: UnsafeRawBufferPointer(start: next + blocks * 64, count: remaining - blocks * 64))
        }

        /// The 32-byte digest; the hasher is spent afterwards.
        mutating func finish() -> [UInt8] {
            let bitLength = length &* 8
            // 0x80, zeros up to 56 mod 64, then the message length in bits, big-endian.
            var padding: [UInt8] = [0x80] + [UInt8](repeating: 0, count: (119 - pending.count) % 64)
            padding += (0 ..< 8).map { UInt8(truncatingIfNeeded: bitLength >> (56 - 8 * UInt64($0))) }
            padding.withUnsafeBytes { update($0) }
            let words = [state.0, state.1, state.2, state.3, state.4, state.5, state.6, state.7]
            return words.flatMap { word in [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: word >> UInt32($0)) } }
        }

        private static let roundConstants: [UInt32] = [
            0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
            0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
            0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
            0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
            0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
            0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
            0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
            0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
        ]

        @inline(__always) private static func rotr(_ x: UInt32, _ n: UInt32) -> UInt32 { (x &>> n) | (x &<< (32 &- n)) }

        /// Hashes `blocks` consecutive 64-byte blocks; the message schedule lives on the stack.
        private static func compress(_ state: inout (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32),
                                     _ data: UnsafeRawPointer, blocks: Int) {
            var (h0, h1, h2, h3, h4, h5, h6, h7) = state
            roundConstants.withUnsafeBufferPointer { k in
                withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 64) { w in
                    for block in 0 ..< blocks {
                        let base = data + block &* 64
                        for t in 0 ..< 16 { w[t] = UInt32(bigEndian: base.loadUnaligned(fromByteOffset: t &* 4, as: UInt32.self)) }
                        for t in 16 ..< 64 {
                            let s0 = rotr(w[t &- 15], 7) ^ rotr(w[t &- 15], 18) ^ (w[t &- 15] &>> 3)
                            let s1 = rotr(w[t &- 2], 17) ^ rotr(w[t &- 2], 19) ^ (w[t &- 2] &>> 10)
                            w[t] = w[t &- 16] &+ s0 &+ w[t &- 7] &+ s1
                        }
                        var (a, b, c, d, e, f, g, h) = (h0, h1, h2, h3, h4, h5, h6, h7)
                        for t in 0 ..< 64 {
                            let t1 = h &+ (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) &+ ((e & f) ^ (~e & g)) &+ k[t] &+ w[t]
                            let t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) &+ ((a & b) ^ (a & c) ^ (b & c))
                            (h, g, f, e, d, c, b, a) = (g, f, e, d &+ t1, c, b, a, t1 &+ t2)
                        }
                        (h0, h1, h2, h3) = (h0 &+ a, h1 &+ b, h2 &+ c, h3 &+ d)
                        (h4, h5, h6, h7) = (h4 &+ e, h5 &+ f, h6 &+ g, h7 &+ h)
                    }
                }
            }
            state = (h0, h1, h2, h3, h4, h5, h6, h7)
        }
    }
}

extension SafeFile {
    /// A shared library's own name (DT_SONAME) and the libraries it needs (DT_NEEDED), read from its
    /// dynamic section without loading it: which NVIDIA libraries a GPU provider needs, and in which
    /// order to load them, is decided before any of them is loaded. Checks the file first
    /// (`checkSharedLibrary`); a library without a dynamic section needs nothing.
    static func dynamicDependencies(_ path: String) throws -> (soname: String?, needed: [String]) {
        try checkSharedLibrary(path)
        let (fd, _, size) = try openRegular(path, maxBytes: nil)
        defer { close(fd) }
        func refuse(_ reason: String) -> FileProblem { .notSharedLibrary(reason: reason) }
        func readBytes(_ count: Int, at offset: UInt64) throws -> [UInt8] {
            guard count >= 0, offset <= UInt64(size), UInt64(count) <= UInt64(size) - offset else {
                throw refuse("corrupt: a table lies past the end of the file")
            }
            var bytes = [UInt8](repeating: 0, count: count)
            let got = try bytes.withUnsafeMutableBytes { try readFully(fd, into: $0, at: Int(offset)) }
            guard got == count else { throw refuse("truncated while it was being read") }
            return bytes
        }
        let header = try readBytes(64, at: 0)
        let programOffset = littleEndian(header, at: 32, width: 8)
        let programCount = Int(littleEndian(header, at: 56, width: 2))
        let table = try readBytes(programCount * 56, at: programOffset)
        // PT_LOAD segments map addresses (which the dynamic section uses) to file offsets.
        var loads: [(address: UInt64, offset: UInt64, length: UInt64)] = []
        var dynamic: (offset: UInt64, length: UInt64)?
        for index in 0 ..< programCount {
            let entry = index * 56
            switch littleEndian(table, at: entry, width: 4) {
            case 1: loads.append((littleEndian(table, at: entry + 16, width: 8), littleEndian(table, at: entry + 8, width: 8),
                                  littleEndian(table, at: entry + 32, width: 8)))
            case 2: dynamic = (littleEndian(table, at: entry + 8, width: 8), littleEndian(table, at: entry + 32, width: 8))
            default: break
            }
        }
        guard let dynamic else { return (nil, []) }
        guard dynamic.length <= 1 << 20 else { throw refuse("corrupt: a dynamic section of \(dynamic.length) bytes") }
        let entries = try readBytes(Int(dynamic.length) / 16 * 16, at: dynamic.offset)
        var neededOffsets: [UInt64] = [], sonameOffset: UInt64?, stringAddress: UInt64?, stringSize: UInt64 = 0
        for entry in stride(from: 0, to: entries.count, by: 16) {
            let value = littleEndian(entries, at: entry + 8, width: 8)
            switch littleEndian(entries, at: entry, width: 8) {
            case 0: break                       // DT_NULL (the rest is padding)
            case 1: neededOffsets.append(value) // DT_NEEDED
            case 5: stringAddress = value       // DT_STRTAB
            case 10: stringSize = value         // DT_STRSZ
            case 14: sonameOffset = value       // DT_SONAME
            default: continue
            }
            if littleEndian(entries, at: entry, width: 8) == 0 { break }
        }
        guard let stringAddress, stringSize > 0, stringSize <= 64 << 20,
              let segment = loads.first(where: { stringAddress >= $0.address && stringAddress - $0.address < $0.length })
        else {
            guard neededOffsets.isEmpty, sonameOffset == nil else { throw refuse("corrupt: no string table for its dynamic section") }
            return (nil, [])
        }
        let strings = try readBytes(Int(stringSize), at: segment.offset + (stringAddress - segment.address))
        func string(at offset: UInt64) throws -> String {
            guard offset < UInt64(strings.count) else { throw refuse("corrupt: a name past its string table") }
            let start = Int(offset)
            let end = strings[start...].firstIndex(of: 0) ?? strings.count
            return String(decoding: strings[start ..< end], as: UTF8.self)
        }
        return (try sonameOffset.map(string(at:)), try neededOffsets.map(string(at:)))
    }
}
