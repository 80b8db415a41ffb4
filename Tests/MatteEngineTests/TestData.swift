import Foundation
import Testing
@testable import MatteEngine
import TestPaths
import MattePixels

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

/// Runs BGRA `frames` through `engine` and collects, after each frame, the working-size alpha of
/// each of `persons` (1-based; nil: the union of everyone tracked).
func workingAlphas(_ engine: MatAnyone2Engine, _ frames: [[UInt8]], width: Int, height: Int,
                   persons: [Int?]) throws -> [[[Float]]] {
    var plane = [UInt8](repeating: 0, count: width * height)
    var report = FrameReport(modelCount: engine.modelNames.count)
    var out: [[[Float]]] = []
    for frame in frames {
        report.clear()
        try frame.withUnsafeBufferPointer { pixels in
            try plane.withUnsafeMutableBufferPointer { alpha in
                try engine.matte(BGRAImage(base: pixels.baseAddress!, width: width, height: height, stride: width * 4),
                                 into: GrayImage(base: alpha.baseAddress!, width: width, height: height, stride: width),
                                 report: &report)
            }
        }
        out.append(try persons.map { try #require(engine.workingAlpha(person: $0)).alpha })
    }
    return out
}

/// The union alpha at working size after each frame.
func workingAlphas(_ engine: MatAnyone2Engine, _ frames: [[UInt8]], width: Int, height: Int) throws -> [[Float]] {
    try workingAlphas(engine, frames, width: width, height: height, persons: [nil]).map { $0[0] }
}
