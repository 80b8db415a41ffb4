import Foundation
import MatteEngine

/// Where `scripts/test.sh` puts what the tests read (installed models, decoded frames), for both
/// test targets.
public enum TestPaths {
    /// Model folder holding `segmenter/` (and `matanyone2/` for the parity tests).
    public static var modelDir: String {
        ProcessInfo.processInfo.environment["MATANYONE_TEST_MODELS"] ?? ModelLocations.defaultModelDir
    }

    /// Decoded frames and other generated inputs; build/test-data in this checkout by default.
    public static var dataDir: String {
        ProcessInfo.processInfo.environment["MATANYONE_TEST_DATA"]
            ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("build/test-data").path
    }

    /// A scratch folder of our own inside the project's build folder.
    public static func scratch(_ name: String) -> String {
        let path = dataDir + "/scratch/" + name + "-" + UUID().uuidString
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }
}
