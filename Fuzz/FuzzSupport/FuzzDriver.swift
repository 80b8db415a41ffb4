import Foundation
import Glibc

// One driver for every fuzz target. Built by scripts/fuzz.sh (coverage instrumentation, AddressSanitizer,
// libFuzzer linked in without its main), `fuzzMain` hands the target to libFuzzer's LLVMFuzzerRunDriver,
// which takes libFuzzer's usual arguments. Built plainly (swift build), the same executable replays the
// files and folders it is given once each: the committed corpus as a regression test, no fuzzer needed.

private typealias RunDriver = @convention(c) (
    UnsafeMutablePointer<Int32>, UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32) -> Int32

/// The target: libFuzzer's callback is a C function, which cannot capture it.
private var target: ((UnsafeRawBufferPointer) -> Void)?

public func fuzzMain(_ body: @escaping (UnsafeRawBufferPointer) -> Void) -> Never {
    target = body
    if let symbol = dlsym(nil, "LLVMFuzzerRunDriver") {
        let driver = unsafeBitCast(symbol, to: RunDriver.self)
        var argc = CommandLine.argc
        var argv = CommandLine.unsafeArgv
        exit(driver(&argc, &argv) { data, size in
            target?(UnsafeRawBufferPointer(start: size > 0 ? data : nil, count: size))
            return 0
        })
    }
    var files: [String] = []
    for argument in CommandLine.arguments.dropFirst() where !argument.hasPrefix("-") {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: argument, isDirectory: &isDirectory) else {
            FileHandle.standardError.write("\(argument): no such file or folder\n".data(using: .utf8)!)
            exit(2)
        }
        if isDirectory.boolValue {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: argument)) ?? []
            files += names.sorted().map { "\(argument)/\($0)" }
        } else {
            files.append(argument)
        }
    }
    for file in files {
        guard let data = FileManager.default.contents(atPath: file) else { continue }
        data.withUnsafeBytes { body($0) }
    }
    print("replayed \(files.count) inputs: no fault")
    exit(0)
}

/// Reads the fuzzer's bytes front to back: small numbers first, the rest as a payload.
public struct FuzzReader {
    private let bytes: UnsafeRawBufferPointer
    private var offset = 0

    public init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    public mutating func byte() -> UInt8 {
        guard offset < bytes.count else { return 0 }
        defer { offset += 1 }
        return bytes[offset]
    }

    public mutating func uint16() -> Int { Int(byte()) << 8 | Int(byte()) }

    /// Everything not read yet.
    public mutating func rest() -> UnsafeRawBufferPointer {
        let start = min(offset, bytes.count)
        offset = bytes.count
        return UnsafeRawBufferPointer(rebasing: bytes[start...])
    }
}
