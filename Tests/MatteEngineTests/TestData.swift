import Foundation
import Testing
@testable import MatteEngine
import TestPaths

/// Frames `scripts/test.sh` decoded (paths: TestPaths, shared with the element tests).
extension TestPaths {
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
