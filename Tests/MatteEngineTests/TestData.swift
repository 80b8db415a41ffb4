import Foundation
import Testing
@testable import MatteEngine

/// Paths the test script (`scripts/test.sh`) prepares: installed models, the runtime, decoded frames.
enum TestData {
    static var environment: [String: String] { ProcessInfo.processInfo.environment }

    /// Model folder holding `segmenter/` (and `matanyone2/` for the parity tests).
    static var modelDir: String { environment["MATANYONE_TEST_MODELS"] ?? ModelLocations.defaultModelDir }

    /// Where scripts/test.sh puts decoded frames and other generated inputs.
    static var dataDir: String {
        environment["MATANYONE_TEST_DATA"]
            ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("build/test-data").path
    }

    /// A scratch folder of our own inside the project's build folder.
    static func scratch(_ name: String) -> String {
        let path = dataDir + "/scratch/" + name + "-" + UUID().uuidString
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Raw BGRA frames decoded by GStreamer (`filesink` of `video/x-raw,format=BGRA`).
    static func frames(_ name: String, width: Int, height: Int) throws -> [[UInt8]] {
        let path = dataDir + "/" + name
        guard let data = FileManager.default.contents(atPath: path) else {
            Issue.record("missing \(path): run scripts/test.sh, which decodes the test clip first")
            throw EngineError.modelMissing(path: path, hint: "run scripts/test.sh")
        }
        let frameSize = width * height * 4
        return stride(from: 0, to: data.count - frameSize + 1, by: frameSize).map { Array(data[$0..<$0 + frameSize]) }
    }
}
