import Foundation
import Glibc
import Testing
import TestPaths
@testable import MatteEngine

/// Careful file access for models, manifests, seed masks and the runtime library: hostile inputs
/// must give clear errors, never a hang or a crash. No models needed.
struct SafeFileTests {
    private func write(_ bytes: [UInt8], to path: String) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    private func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    private func sha256(_ text: String) -> String { hex(Array(text.utf8).withUnsafeBytes { SafeFile.sha256($0) }) }

    private func randomBytes(_ count: Int) throws -> [UInt8] {
        let source = try #require(FileHandle(forReadingAtPath: "/dev/urandom"))
        defer { try? source.close() }
        return [UInt8](source.readData(ofLength: count))
    }

    /// The reason of a `.notSharedLibrary` refusal, or nil for anything else.
    private func refusal(_ path: String) -> String? {
        let problem = #expect(throws: FileProblem.self) { try SafeFile.checkSharedLibrary(path) }
        guard case let .notSharedLibrary(reason)? = problem else { return nil }
        return reason
    }

    /// The C library this process can dlopen.
    private func libcPath() throws -> String {
        let candidates = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6",
                          "/lib/aarch64-linux-gnu/libc.so.6", "/usr/lib/aarch64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
        return try #require(candidates.first { FileManager.default.fileExists(atPath: $0) })
    }

    // MARK: - Special files, sizes, permissions

    @Test func fifoIsRefusedWithoutBlocking() throws {
        // Opening a FIFO for reading without a writer would block forever; every entry point refuses it.
        let fifo = TestPaths.scratch("safefile") + "/fifo"
        try #require(mkfifo(fifo, 0o600) == 0)
        let expected = FileProblem.notRegular(kind: "a FIFO")
        #expect(throws: expected) { try SafeFile.checkRegular(fifo) }
        #expect(throws: expected) { try SafeFile.read(fifo, maxBytes: 1024) }
        #expect(throws: expected) { try SafeFile.sha256Hex(ofFile: fifo) }
        #expect(throws: expected) { try SafeFile.checkSharedLibrary(fifo) }
        #expect(expected.description == "is a FIFO, not a regular file")
    }

    @Test func directoriesDevicesAndMissingFilesAreRefused() throws {
        let folder = TestPaths.scratch("safefile")
        #expect(throws: FileProblem.notRegular(kind: "a directory")) { try SafeFile.read(folder, maxBytes: 1024) }
        #expect(throws: FileProblem.notRegular(kind: "a character device")) { try SafeFile.read("/dev/null", maxBytes: 1024) }
        #expect(throws: FileProblem.missing) { try SafeFile.read(folder + "/absent.json", maxBytes: 1024) }
        #expect(throws: FileProblem.missing) { try SafeFile.sha256Hex(ofFile: folder + "/absent.onnx") }
        try #require(symlink(folder + "/absent.onnx", folder + "/dangling") == 0)
        #expect(throws: FileProblem.missing) { try SafeFile.checkRegular(folder + "/dangling") }
        // A NUL would silently cut the path short in C.
        #expect(throws: FileProblem.ioError(errno: EINVAL, message: "the path contains a NUL byte")) {
            try SafeFile.read(folder + "/x\0y", maxBytes: 1024)
        }
    }

    @Test func sizeLimitIsEnforcedBeforeReading() throws {
        let path = TestPaths.scratch("safefile") + "/manifest.json"
        let content = try randomBytes(1000)
        try write(content, to: path)
        #expect(throws: FileProblem.tooLarge(size: 1000, limit: 999)) { try SafeFile.read(path, maxBytes: 999) }
        #expect(throws: FileProblem.tooLarge(size: 1000, limit: 999)) { try SafeFile.checkRegular(path, maxBytes: 999) }
        #expect(try SafeFile.read(path, maxBytes: 1000) == content)
        #expect(try SafeFile.checkRegular(path) == 1000)
        #expect(FileProblem.tooLarge(size: 3_000_000_000, limit: 64 << 20).description
                == "is larger than the 64 MiB limit (3.0 GB)")
    }

    @Test func unreadableFileIsPermissionDenied() throws {
        let path = TestPaths.scratch("safefile") + "/mask.png"
        try write([1, 2, 3], to: path)
        try #require(chmod(path, 0) == 0)
        if getuid() != 0 {
            #expect(throws: FileProblem.permissionDenied) { try SafeFile.read(path, maxBytes: 1024) }
            #expect(throws: FileProblem.permissionDenied) { try SafeFile.sha256Hex(ofFile: path) }
        } else {
            // root reads mode-000 files; make sure that is not mistaken for an error either.
            #expect(try SafeFile.read(path, maxBytes: 1024) == [1, 2, 3])
        }
    }

    // MARK: - Names from a manifest

    @Test func resolveKeepsManifestNamesInsideTheFolder() throws {
        let scratch = TestPaths.scratch("safefile")
        let folder = scratch + "/models"
        try FileManager.default.createDirectory(atPath: folder + "/sub", withIntermediateDirectories: true)
        try write([1], to: folder + "/model.onnx")
        try write([2], to: scratch + "/outside.onnx")
        try #require(symlink("model.onnx", folder + "/alias.onnx") == 0)
        try #require(symlink(scratch + "/outside.onnx", folder + "/escape.onnx") == 0)
        let root = try #require(realpath(folder, nil).map { pointer in
            defer { free(pointer) }
            return String(cString: pointer)
        })

        #expect(try SafeFile.resolve("model.onnx", inside: folder) == root + "/model.onnx")
        #expect(try SafeFile.resolve("sub/../model.onnx", inside: folder) == root + "/model.onnx")
        #expect(try SafeFile.resolve("alias.onnx", inside: folder) == root + "/model.onnx")
        #expect(throws: FileProblem.outsideFolder(resolved: folder + "/../outside.onnx", folder: folder)) {
            try SafeFile.resolve("../outside.onnx", inside: folder)
        }
        #expect(throws: FileProblem.outsideFolder(resolved: "/etc/passwd", folder: folder)) {
            try SafeFile.resolve("/etc/passwd", inside: folder)
        }
        let escape = #expect(throws: FileProblem.self) { try SafeFile.resolve("escape.onnx", inside: folder) }
        guard case let .outsideFolder(resolved, resolvedFolder)? = escape else {
            Issue.record("a symlink out of the folder must be refused as outside, got \(String(describing: escape))")
            return
        }
        #expect(resolved.hasSuffix("/outside.onnx") && resolvedFolder == root)
        #expect(throws: FileProblem.missing) { try SafeFile.resolve("absent.onnx", inside: folder) }
        #expect(throws: FileProblem.self) { try SafeFile.resolve("", inside: folder) }
    }

    // MARK: - SHA-256

    @Test func sha256MatchesStandardVectors() {
        #expect(sha256("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(sha256("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(sha256(String(repeating: "a", count: 1_000_000))
                == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    @Test func sha256InPiecesEqualsSha256AtOnce() throws {
        // Pieces of every length 1…130 cross block boundaries at every offset.
        let bytes = try randomBytes(20_000)
        bytes.withUnsafeBytes { all in
            var hasher = SafeFile.SHA256()
            var start = 0, length = 1
            while start < all.count {
                let end = min(start + length, all.count)
                hasher.update(UnsafeRawBufferPointer(rebasing: all[start ..< end]))
                (start, length) = (end, length % 130 + 1)
            }
            #expect(hasher.finish() == SafeFile.sha256(all))
        }
    }

    @Test func fileHashEqualsBufferHashAndIsCached() throws {
        // 3 MiB + 13: several 1 MiB chunks and a final partial block.
        let path = TestPaths.scratch("safefile") + "/model.onnx"
        let content = try randomBytes(3 << 20 + 13)
        try write(content, to: path)
        let expected = hex(content.withUnsafeBytes { SafeFile.sha256($0) })
        #expect(try SafeFile.sha256Hex(ofFile: path) == expected)
        #expect(try SafeFile.sha256Hex(ofFile: path) == expected)   // from the cache
        // New content (and size) is a new identity: hashed again, not served stale from the cache.
        let changed = Array(content.dropLast(7))
        try write(changed, to: path)
        #expect(try SafeFile.sha256Hex(ofFile: path) == hex(changed.withUnsafeBytes { SafeFile.sha256($0) }))
    }

    // MARK: - Shared libraries

    @Test func acceptsRealLibrariesAndExecutables() throws {
        try SafeFile.checkSharedLibrary(try libcPath())
        try SafeFile.checkSharedLibrary("/proc/self/exe")
    }

    @Test func refusesFilesThatAreNotCompleteLibraries() throws {
        let folder = TestPaths.scratch("safefile")
        try write(Array(String(repeating: "not a library\n", count: 10).utf8), to: folder + "/text.so")
        #expect(refusal(folder + "/text.so") == "not an ELF file")
        try write(Array("0123456789".utf8), to: folder + "/ten.so")
        #expect(refusal(folder + "/ten.so") == "not an ELF file")
        try write([0x7f, 0x45, 0x4c, 0x46, 2, 1, 1, 0, 0, 0], to: folder + "/ten-elf.so")
        #expect(refusal(folder + "/ten-elf.so") == "truncated: the file is 10 bytes but its ELF header needs 64")

        let libc = try SafeFile.read(try libcPath(), maxBytes: 64 << 20)
        for length in [libc.count / 2, 4096] {
            let path = folder + "/libc-\(length).so"
            try write(Array(libc.prefix(length)), to: path)
            let reason = refusal(path)
            #expect(reason?.hasPrefix("truncated: the file is \(length) bytes but ") == true, "\(reason ?? "accepted")")
        }

        // Hostile header fields: a 32-bit class, a foreign machine, an offset that overflows.
        var patched = libc
        patched[4] = 1
        try write(patched, to: folder + "/class.so")
        #expect(refusal(folder + "/class.so") == "a 32-bit ELF file")
        patched = libc
        patched[18 ..< 20] = [8, 0]   // MIPS: foreign on every machine this runs on
        try write(patched, to: folder + "/machine.so")
        #expect(refusal(folder + "/machine.so")?.hasPrefix("built for machine 8, this is ") == true)
        patched = libc
        patched[32 ..< 40] = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]   // e_phoff
        try write(patched, to: folder + "/overflow.so")
        #expect(refusal(folder + "/overflow.so")?.hasPrefix("corrupt: ") == true)
    }
}
