import Foundation
import MatteEngine

/// Where `scripts/test.sh` puts what the tests read (installed models, decoded frames), for both
/// test targets.
public enum TestPaths {
    /// Model folder holding `segmenter/` (and `matanyone2/` for the parity tests).
    public static var modelDir: String {
        ProcessInfo.processInfo.environment["MATANYONE_TEST_MODELS"] ?? ModelLocations.defaultModelDir
    }

    /// A model folder with every set (segmenter/, rvm/, matanyone2/), as a user's is once MatAnyone2
    /// is installed: engine=auto runs MatAnyone2 there, seeded by RVM.
    public static var fullModelDir: String {
        ProcessInfo.processInfo.environment["MATANYONE_TEST_FULL_MODELS"]
            ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("build/test-models-full").path
    }

    /// Decoded frames and other generated inputs; build/test-data in this checkout by default.
    public static var dataDir: String {
        ProcessInfo.processInfo.environment["MATANYONE_TEST_DATA"]
            ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("build/test-data").path
    }

    /// The float32 array of a `.npy` file `scripts/test.sh` wrote (numpy format 1.0: little-endian,
    /// C order; the header's shape is the caller's to know), e.g. the upstream reference alphas.
    public static func loadNpy(_ name: String) throws -> [Float] {
        let bytes = try Data(contentsOf: URL(fileURLWithPath: dataDir + "/" + name))
        let headerLength = Int(bytes[8]) | Int(bytes[9]) << 8
        return bytes.subdata(in: (10 + headerLength)..<bytes.count).withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
    }

    /// A scratch folder of our own inside the project's build folder.
    public static func scratch(_ name: String) -> String {
        let path = dataDir + "/scratch/" + name + "-" + UUID().uuidString
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }
}
