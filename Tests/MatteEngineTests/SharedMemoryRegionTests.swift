import Foundation
import Testing
@testable import MatteEngine
import TestPaths

/// The shared memory regions the inference-server client makes on this host: named for their pid
/// namespace and process, and the ones a killed process left removed by the next process that makes
/// one (only those: not a live process's, not another namespace's, not a file of another form).
struct SharedMemoryRegionTests {
    @Test func aRegionIsNamedForItsNamespaceAndProcessAndRemovedWithIt() throws {
        let namespace = SharedMemoryRegion.namespace
        #expect(namespace != "0" && namespace.allSatisfy(\.isNumber), "pid namespace: \(namespace)")
        var path = ""
        do {
            let region = try SharedMemoryRegion(role: "in", size: 4096)
            #expect(region.key.hasPrefix("/matanyone-\(namespace)-\(getpid())-") && region.key.hasSuffix("-in"), "\(region.key)")
            path = "/dev/shm" + region.key
            #expect(FileManager.default.fileExists(atPath: path))
        }
        #expect(!FileManager.default.fileExists(atPath: path), "\(path) outlived its region")
        #expect(SharedMemoryRegion.runs(getpid()))
    }

    @Test func theRegionsOfProcessesThatAreGoneAreRemoved() throws {
        let folder = TestPaths.scratch("shm-stale")
        let namespace = "4026531836", dead: pid_t = 999_991, alive: pid_t = 999_992
        let stale = ["matanyone-\(namespace)-\(dead)-12345-in", "matanyone-\(namespace)-\(dead)-678-out"]
        let kept = ["matanyone-\(namespace)-\(alive)-1-in",            // its process runs
                    "matanyone-4026532000-\(dead)-1-in",                // another namespace: its pids are not ours
                    "matanyone-\(namespace)-\(dead)-x-in",              // not a name this code makes
                    "matanyone-\(namespace)-\(dead)-1-in-extra",
                    "matanyone-\(namespace)-\(getpid())-1-out",         // this process
                    "other-\(dead)-1-in"]
        for name in stale + kept { try Data([1]).write(to: URL(fileURLWithPath: folder + "/" + name)) }
        let runs = { (pid: pid_t) in pid != dead }
        // A namespace not known removes nothing.
        #expect(SharedMemoryRegion.removeStale(in: folder, namespace: "0", runs: runs).isEmpty)
        let removed = SharedMemoryRegion.removeStale(in: folder, namespace: namespace, runs: runs)
        #expect(removed == stale.sorted())
        let left = Set(try FileManager.default.contentsOfDirectory(atPath: folder))
        #expect(left == Set(kept), "\(left)")
    }
}
