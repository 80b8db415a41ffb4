import Dispatch
import Foundation
import MattePixelTypes

/// Foreground colours at the soft edge of a matte, so that a composite over a new background keeps no
/// colour of the old one. A frame pixel is I = α·F + (1 − α)·B; blending the frame itself over a new
/// background puts α·I where α·F belongs, an error of α·(1 − α)·(B − F): the halo.
///
/// The estimate follows the multi-level method of Germer, Uelwer, Conrad and Harmeling ("Fast
/// Multi-Level Foreground Estimation", ICPR 2020), written here from the paper: F and B minimise the
/// compositing error plus a smoothness term that ties each pixel to its four neighbours with weight
/// ε + ω·|α_i − α_j| (strongest where the matte changes, where the compositing equation alone says
/// least). A relaxation sweep solves each pixel's 2×2 system per channel with its neighbours fixed,
///
///   [α² + W      α(1 − α)   ] [F]   [α·I       + Σ w_j·F_j]
///   [α(1 − α)    (1 − α)² + W] [B] = [(1 − α)·I + Σ w_j·B_j],   W = Σ w_j,
///
/// coarse to fine over a pyramid from 1×1 up, each level starting from the one below.
///
/// Departures from the paper, for speed (the budget is a fraction of a segmenter frame) or for an exact
/// composite, each measured on the tests' ground truths:
/// - levels halve, and are averaged from the frame rather than sampled from it (the coarse ones from
///   the middle two rows of each block: reading the frame is what building them costs);
/// - sweeps are Jacobi (each reads the previous one), so that solving only near the soft edge gives
///   what solving the whole level would;
/// - α = 1 pins F = I and α = 0 pins B = I (their smoothness weights drop out), so opaque pixels
///   keep their colour exactly;
/// - ω = 0.1 rather than 1: less smoothing across the edge; a lower error on seven of the tests' eight
///   ground truths (the eighth 3 % higher);
/// - the two finest levels are one step: each soft pixel's system solved once, with the quarter-size
///   answer, upsampled bilinearly, standing in for its neighbours' F and B. It matched full sweeps at
///   the half-size and full-size levels on the ground truths, at a quarter of the work.
///
/// Where the work goes: only 32×32 tiles whose matte is soft are finished (5–15 % of a frame), each in
/// scratch of its own, in parallel; the quarter- and eighth-size levels are built and swept only near
/// them; the smaller levels are whole. Buffers (about 20 MB at 1080p: the levels' planes and the
/// tiles' output) are allocated once per frame size.
final class ForegroundEstimator {
    /// A square of the frame (cut at the right and bottom edges) whose matte is soft somewhere.
    struct Tile {
        let x: Int, y: Int, width: Int, height: Int
    }

    let tileSize: Int
    /// A tile takes part when its matte has a value in this range. Just outside it the halo is at most
    /// 2 levels (α·(1 − α)·255 < 3), not worth a tile; inside a tile every 0 < α < 255 is estimated.
    static let softAlpha: ClosedRange<UInt8> = 3...252

    /// ε: a little smoothness everywhere, so that each system has one solution.
    let regularization: Float
    /// ω: how much more smoothness where the matte changes.
    let gradientWeight: Float
    /// Jacobi sweeps on the quarter-size level, and on the smaller ones (until they are small).
    let storedSweeps: Int
    let coarseSweeps: Int
    /// Small levels are cheap: they get this many sweeps (information crosses them in few).
    let smallLevelSweeps = 10
    static let smallLevelPixels = 64 * 64

    private let slices: Int
    private var width = 0, height = 0
    /// Levels from a quarter of the frame size down to 1×1.
    private var storedLevels: [StoredLevel] = []
    private var sliceScratch: [TileScratch] = []
    private var rowSums: [UnsafeMutablePointer<UInt16>] = []
    /// Soft tiles of the last frame and their estimated colours (BGRA, tileSize² pixels each).
    private(set) var tiles: [Tile] = []
    private var foregroundTiles = UnsafeMutablePointer<UInt8>.allocate(capacity: 0)
    /// Which tiles are soft (row-major).
    private var softTileGrid: [Bool] = []
    private var tileColumns = 0, tileRows = 0
    /// Where the quarter- and eighth-size levels are built and swept (see `nearSoftTiles()`).
    private var domains: [[Segment]] = [[], []]

    /// `threads` caps the parallelism (0 = one per core, at most 4).
    init(threads: Int = 0, tileSize: Int = 32, storedSweeps: Int = 4, coarseSweeps: Int = 4,
         regularization: Float = 1e-5, gradientWeight: Float = 0.1) {
        // An eighth-size tile at least 4 wide: the sweep's steps of 4 never reach into a neighbouring segment.
        precondition(tileSize >= 32 && tileSize % 32 == 0)
        self.tileSize = tileSize
        self.regularization = regularization
        self.gradientWeight = gradientWeight
        let cores = threads > 0 ? threads : min(max(ProcessInfo.processInfo.activeProcessorCount, 1), 4)
        // Several slices per core, taken as threads come free (see Slices.count).
        slices = cores > 1 ? 4 * cores : 1
        self.storedSweeps = storedSweeps
        self.coarseSweeps = coarseSweeps
    }

    deinit {
        alphaOfSum.deallocate()
        foregroundTiles.deallocate()
        for sums in rowSums { sums.deallocate() }
    }

    /// Estimates the foreground colours of `frame` where `alpha` is soft, into `tiles` (read them with
    /// `foreground(ofTile:)`). Elsewhere the frame itself is the answer.
    func estimate(frame: BGRAImage, alpha: GrayView) {
        precondition(frame.width == alpha.width && frame.height == alpha.height)
        prepare(width: frame.width, height: frame.height)
        findSoftTiles(alpha)
        if tiles.isEmpty { return }
        let domains = nearSoftTiles()
        buildStoredLevels(frame: frame, alpha: alpha, quarterDomain: domains[0])
        solveStoredLevels(domains: domains)
        let tileList = tiles, quarter = storedLevels[0]
        let tileBytes = tileSize * tileSize * 4
        let output = foregroundTiles
        Slices.forEach(of: tileList.count, slices: slices) { range, slice in
            let scratch = sliceScratch[slice]
            for index in range {
                finishTile(tileList[index], frame: frame, alpha: alpha, quarter: quarter, scratch: scratch,
                           output: output + index * tileBytes)
            }
        }
    }

    /// The estimated colours of tile `index` (BGRA; the frame's own where α is 0 or 255, and its alpha byte).
    func foreground(ofTile index: Int) -> BGRAImage {
        let tile = tiles[index]
        return BGRAImage(base: foregroundTiles + index * tileSize * tileSize * 4, width: tile.width,
                         height: tile.height, stride: tileSize * 4)
    }

    // MARK: - Buffers

    private func prepare(width: Int, height: Int) {
        if width == self.width && height == self.height { return }
        self.width = width
        self.height = height
        storedLevels = []
        var levelWidth = (width + 3) / 4, levelHeight = (height + 3) / 4
        repeat {
            storedLevels.append(StoredLevel(width: levelWidth, height: levelHeight))
            levelWidth = (levelWidth + 1) / 2
            levelHeight = (levelHeight + 1) / 2
        } while storedLevels.count < 2 || storedLevels.last!.width * storedLevels.last!.height > 1
        tileColumns = (width + tileSize - 1) / tileSize
        tileRows = (height + tileSize - 1) / tileSize
        let tileCount = tileColumns * tileRows
        tiles = []
        tiles.reserveCapacity(tileCount)
        softTileGrid = [Bool](repeating: false, count: tileCount)
        domains = (0..<2).map { level in
            var segments: [Segment] = []
            segments.reserveCapacity(storedLevels[level].height * (tileColumns + 1) / 2)
            return segments
        }
        foregroundTiles.deallocate()
        foregroundTiles = .allocate(capacity: tileCount * tileSize * tileSize * 4)
        if sliceScratch.isEmpty {
            sliceScratch = (0..<slices).map { _ in TileScratch(tileSize: tileSize) }
        }
        for sums in rowSums { sums.deallocate() }
        rowSums = (0..<slices).map { _ in .allocate(capacity: width * 5) }
    }

    /// Tiles whose matte has a value in `softAlpha`: the grid (tile rows in parallel), then the list.
    private func findSoftTiles(_ alpha: GrayView) {
        let size = tileSize, width = self.width, height = self.height, columns = tileColumns
        let low = Self.softAlpha.lowerBound, span = Self.softAlpha.upperBound - low
        softTileGrid.withUnsafeMutableBufferPointer { grid in
            let grid = grid.baseAddress!
            Slices.forEach(of: tileRows, slices: slices) { tileRows, _ in
                // (a − low) wraps below `low`, so one unsigned compare tests the range. The flags of a tile
                // row's pixel rows are OR-ed column by column (a plain loop over a whole row vectorises),
                // then each tile's columns are tested eight at a time.
                let flags = UnsafeMutablePointer<UInt8>.allocate(capacity: columns * size)
                defer { flags.deallocate() }
                for tileY in tileRows {
                    flags.update(repeating: 0, count: columns * size)
                    for y in (tileY * size)..<min((tileY + 1) * size, height) {
                        let row = alpha.base + y * alpha.stride
                        for x in 0..<width { flags[x] |= (row[x] &- low) <= span ? 1 : 0 }
                    }
                    for tileX in 0..<columns {
                        let words = UnsafeRawPointer(flags + tileX * size)
                        var any: UInt64 = 0
                        for word in 0..<(size / 8) { any |= words.loadUnaligned(fromByteOffset: 8 * word, as: UInt64.self) }
                        grid[tileY * columns + tileX] = any != 0
                    }
                }
            }
        }
        tiles.removeAll(keepingCapacity: true)
        for tileY in 0..<tileRows {
            for tileX in 0..<tileColumns where softTileGrid[tileY * tileColumns + tileX] {
                let x = tileX * size, y = tileY * size
                tiles.append(Tile(x: x, y: y, width: min(size, width - x), height: min(size, height - y)))
            }
        }
    }

    // MARK: - Stored levels

    /// The stored levels' images and mattes: the eighth-size level sampled from the frame, the smaller
    /// ones averaged from it, and the quarter-size level sampled only where it will be swept.
    private func buildStoredLevels(frame: BGRAImage, alpha: GrayView, quarterDomain: [Segment]) {
        let eighth = storedLevels[1]
        sample(frame: frame, alpha: alpha, into: eighth, scale: 8, segments: eighth.wholeRows)
        eighth.refreshBorder(planes: 0..<4)
        for index in 2..<storedLevels.count {
            storedLevels[index].average(storedLevels[index - 1])
        }
        sample(frame: frame, alpha: alpha, into: storedLevels[0], scale: 4, segments: quarterDomain)
        storedLevels[0].refreshBorder(planes: 0..<4)
    }

    /// Image and matte of `level` on `segments`, each of its pixels the mean of the middle two rows of
    /// a `scale`×`scale` block of the frame (edges clamped). Reading the frame is what this costs
    /// (memory bound), and these levels only start the finer ones: two rows of each block suffice.
    private func sample(frame: BGRAImage, alpha: GrayView, into level: StoredLevel, scale: Int, segments: [Segment]) {
        let planes = level.planes
        let width = self.width, height = self.height
        let sums = rowSums
        let toFloat = 1 / Float(2 * scale)
        Slices.forEach(of: segments.count, slices: segments.count > 64 ? slices : 1) { range, slice in
            let colourSums = sums[slice], alphaSums = sums[slice] + width * 4
            for segment in segments[range] {
                let top = min(segment.y * scale + scale / 2 - 1, height - 1)
                let bottom = min(segment.y * scale + scale / 2, height - 1)
                let first = segment.columns.lowerBound * scale, end = min(segment.columns.upperBound * scale, width)
                let c0 = frame.base + top * frame.stride, c1 = frame.base + bottom * frame.stride
                for i in (4 * first)..<(4 * end) { colourSums[i] = UInt16(c0[i]) &+ UInt16(c1[i]) }
                let m0 = alpha.base + top * alpha.stride, m1 = alpha.base + bottom * alpha.stride
                for i in first..<end { alphaSums[i] = UInt16(m0[i]) &+ UInt16(m1[i]) }
                let out = level.index(0, segment.y)
                let blue = planes.image(0) + out, green = planes.image(1) + out, red = planes.image(2) + out
                let matte = planes.alpha + out
                for levelX in segment.columns {
                    let blockStart = levelX * scale
                    var colour = SIMD2<UInt32>.zero, matteSum: UInt64 = 0
                    if blockStart + scale <= width {
                        // Four pixels' BGRA sums as 32-bit lanes holding two 16-bit sums each (B | G << 16,
                        // R | A << 16): adding lanes adds both halves, and none exceeds 2 × 8 × 255.
                        for group in stride(from: blockStart, to: blockStart + scale, by: 4) {
                            let four = UnsafeRawPointer(colourSums + 4 * group).loadUnaligned(as: SIMD8<UInt32>.self)
                            let pairs = four.lowHalf &+ four.highHalf
                            colour &+= pairs.lowHalf &+ pairs.highHalf
                            let mattes = UnsafeRawPointer(alphaSums + group).loadUnaligned(as: UInt64.self)
                            matteSum &+= (mattes & 0xFFFF) &+ (mattes >> 16 & 0xFFFF) &+ (mattes >> 32 & 0xFFFF) &+ (mattes >> 48)
                        }
                    } else {
                        for dx in 0..<scale {
                            let x = min(blockStart + dx, width - 1)
                            colour &+= SIMD2(UInt32(colourSums[4 * x]) | UInt32(colourSums[4 * x + 1]) << 16,
                                             UInt32(colourSums[4 * x + 2]))
                            matteSum &+= UInt64(alphaSums[x])
                        }
                    }
                    blue[levelX] = Float(Int(colour[0] & 0xFFFF)) * toFloat
                    green[levelX] = Float(Int(colour[0] >> 16)) * toFloat
                    red[levelX] = Float(Int(colour[1] & 0xFFFF)) * toFloat
                    // Exact division, so that an opaque block gives exactly 1.
                    matte[levelX] = Float(Int(matteSum)) / Float(2 * scale * 255)
                }
            }
        }
    }

    /// Coarse to fine over the stored levels; each ends with its answer in `level.solution`. The
    /// quarter- and eighth-size levels are started and swept only in their domains (`nearSoftTiles()`).
    private func solveStoredLevels(domains: [[Segment]]) {
        let weights = (regularization, gradientWeight)
        for index in stride(from: storedLevels.count - 1, through: 0, by: -1) {
            let level = storedLevels[index]
            let sweepSegments: [Segment]
            if index == storedLevels.count - 1 {
                level.startFromImage()
                sweepSegments = level.wholeRows
            } else if index < 2 {
                level.startFrom(storedLevels[index + 1], segments: domains[index])
                sweepSegments = domains[index]
            } else {
                level.startFrom(storedLevels[index + 1], segments: level.wholeRows)
                sweepSegments = level.wholeRows
            }
            let sweeps = sweepCount(level: index)
            // Parallel when a sweep is worth more than handing out the work (tens of microseconds).
            let pixels = sweepSegments.reduce(0) { $0 + $1.columns.count }
            let slices = pixels >= 16_384 ? self.slices : 1
            for _ in 0..<sweeps {
                let source = level.solution, planes = level.planes
                Slices.forEach(of: sweepSegments.count, slices: slices) { range, _ in
                    for segment in sweepSegments[range] {
                        ForegroundEstimator.relax(planes, from: source, row: segment.y + 1,
                                                  columns: (segment.columns.lowerBound + 1)..<(segment.columns.upperBound + 1),
                                                  weights: weights)
                    }
                }
                level.solution = 1 - source
                level.refreshBorder(planes: level.solutionPlanes)
            }
        }
    }

    /// Jacobi sweeps on stored level `index` (0: quarter size).
    private func sweepCount(level index: Int) -> Int {
        let level = storedLevels[index]
        if level.width * level.height <= Self.smallLevelPixels { return smallLevelSweeps }
        return index == 0 ? storedSweeps : coarseSweeps
    }

    /// The parts of the quarter- and eighth-size levels that reach the tiles, as row segments: within
    /// them the sweeps give what sweeping the whole level would; the rest is neither built (quarter)
    /// nor swept. A tile reads its quarter-size square and one pixel around it; the quarter level's
    /// sweeps reach `storedSweeps` further, and its start reads the eighth level under that, which the
    /// eighth level's sweeps must reach in turn. Rounded up to whole tiles.
    private func nearSoftTiles() -> [[Segment]] {
        let quarterStep = tileSize / 4, eighthStep = tileSize / 8
        let quarterDilation = (sweepCount(level: 0) + 1 + quarterStep - 1) / quarterStep
        let eighthDilation = quarterDilation + (sweepCount(level: 1) + eighthStep - 1) / eighthStep
        for index in 0..<2 {
            let level = storedLevels[index], step = tileSize >> (2 + index)
            let dilation = index == 0 ? quarterDilation : eighthDilation
            var segments = domains[index]
            domains[index] = []  // so that the buffer is ours alone and is reused, not copied
            segments.removeAll(keepingCapacity: true)
            for tileY in 0..<tileRows {
                var tileX = 0
                while tileX < tileColumns {
                    guard isNearSoftTile(tileX, tileY, within: dilation) else { tileX += 1; continue }
                    let first = tileX
                    while tileX < tileColumns && isNearSoftTile(tileX, tileY, within: dilation) { tileX += 1 }
                    let columns = (first * step)..<min(tileX * step, level.width)
                    for y in (tileY * step)..<min((tileY + 1) * step, level.height) where !columns.isEmpty {
                        segments.append(Segment(y: y, columns: columns))
                    }
                }
            }
            domains[index] = segments
        }
        return domains
    }

    private func isNearSoftTile(_ tileX: Int, _ tileY: Int, within distance: Int) -> Bool {
        for y in max(tileY - distance, 0)...min(tileY + distance, tileRows - 1) {
            for x in max(tileX - distance, 0)...min(tileX + distance, tileColumns - 1) where softTileGrid[y * tileColumns + x] {
                return true
            }
        }
        return false
    }

    // MARK: - Tiles

    /// The full-size answer over one tile, in one step from the quarter level: each soft pixel's 2×2
    /// system, with the quarter level's F and B upsampled bilinearly standing in for its neighbours'
    /// (a Jacobi step from that start, the neighbours' smooth values taken at the pixel itself). Measured
    /// on the ground truths of the tests it matches a full sweep at the half-size and full-size levels,
    /// at a quarter of the work.
    private func finishTile(_ tile: Tile, frame: BGRAImage, alpha: GrayView, quarter: StoredLevel,
                            scratch: TileScratch, output: UnsafeMutablePointer<UInt8>) {
        let size = tileSize, width = self.width, height = self.height
        let quarterPlanes = quarter.planes.solutionPlanes(quarter.solution)
        // Quarter-level pixel q's centre lies at full-size 4q + 1.5, so full-size x reads q = x/4 − 0.375:
        // for x ≡ 0, 1, 2, 3 (mod 4) the left neighbour weighs 0.375, 0.125 and (from q) 0.875, 0.625.
        let leftWeight = Lanes(0.375, 0.125, 0.875, 0.625), rightWeight = 1 - leftWeight
        let firstColumn = tile.x / 4 - 1, firstRow = tile.y / 4 - 1
        let rowCount = size / 4 + 2, columnCount = size / 4 + 3
        // Along the rows first, on the quarter rows the tile reads (edges clamped), into `rows`.
        for r in 0..<rowCount {
            let quarterRow = quarter.index(0, min(max(firstRow + r, 0), quarter.height - 1))
            for plane in 0..<6 {
                let from = quarterPlanes[plane] + quarterRow, gathered = scratch.gathered
                for k in 0..<columnCount { gathered[k] = from[min(max(firstColumn + k, 0), quarter.width - 1)] }
                let to = scratch.rows + (r * 6 + plane) * size
                for group in 0..<(size / 4) {
                    let four = Self.load(gathered + group)
                    let left = Lanes(four[0], four[0], four[1], four[1]), right = Lanes(four[1], four[1], four[2], four[2])
                    Self.store(left * leftWeight + right * rightWeight, to + 4 * group)
                }
            }
        }
        // The matte around the tile, one pixel wider (the weights read the neighbours'; edges clamped).
        let toAlpha = alphaOfSum
        let mattes = scratch.mattes, matteStride = size + 2
        let interior = tile.x >= 1 && tile.x + size + 1 <= width
        for v in 0..<(size + 2) {
            let row = alpha.base + min(max(tile.y + v - 1, 0), height - 1) * alpha.stride
            let to = mattes + v * matteStride
            var u = 0
            if interior {
                // Four at a time: bytes to floats through their bits, divided exactly (255 gives 1).
                let from = row + tile.x - 1
                while u + 4 <= size + 2 {
                    let bytes = Int32(bitPattern: UnsafeRawPointer(from + u).loadUnaligned(as: UInt32.self))
                    let four = SIMD4<Int32>(bytes & 0xFF, bytes >> 8 & 0xFF, bytes >> 16 & 0xFF, bytes >> 24 & 0xFF)
                    Self.store(Self.float(four) / Lanes(repeating: 255), to + u)
                    u += 4
                }
            }
            for u in u..<(size + 2) { to[u] = toAlpha[4 * Int(row[min(max(tile.x + u - 1, 0), width - 1)])] }
        }
        let epsilon = TileLanes(repeating: regularization), omega = TileLanes(repeating: gradientWeight)
        let one = TileLanes(repeating: 1), lanes = TileLanes.scalarCount
        for v in 0..<tile.height {
            let source = frame.base + (tile.y + v) * frame.stride + 4 * tile.x
            let out = output + v * size * 4
            // The two upsampled quarter rows this row lies between, and their weights.
            let phase = v & 3, upper = v >> 2 + (phase < 2 ? 0 : 1)
            let upperWeight = TileLanes(repeating: leftWeight[phase]), lowerWeight = 1 - upperWeight
            let upperRow = scratch.rows + upper * 6 * size, lowerRow = upperRow + 6 * size
            for group in 0..<(size / lanes) {
                let u = lanes * group, count = min(tile.width - u, lanes)
                if count <= 0 { break }
                // The frame's pixels (fewer at the frame's right edge): the output where α is 0 or 1.
                let pixels = UnsafeMutableRawPointer(out + 4 * u)
                // (A constant: the helpers below capture it, and a captured variable costs an access check.)
                let frameBits: TileBits
                if count == lanes {
                    frameBits = UnsafeRawPointer(source + 4 * u).loadUnaligned(as: TileBits.self)
                } else {
                    var partial = TileBits.zero
                    for lane in 0..<count { partial[lane] = UnsafeRawPointer(source + 4 * (u + lane)).loadUnaligned(as: Int32.self) }
                    frameBits = partial
                }
                @inline(__always) func write(_ value: TileBits) {
                    if count == lanes {
                        pixels.storeBytes(of: value, as: TileBits.self)
                    } else {
                        for lane in 0..<count { pixels.storeBytes(of: value[lane], toByteOffset: 4 * lane, as: Int32.self) }
                    }
                }
                let centre = mattes + (v + 1) * matteStride + u + 1
                let a = Self.loadTile(centre)
                // a·(1 − a) > 0 exactly where the matte is soft (tested on the bits: no float reduction).
                let softWords = unsafeBitCast(a * (one - a), to: TileWords.self)
                var anySoft: UInt64 = 0
                for index in softWords.indices { anySoft |= softWords[index] }
                if anySoft == 0 {
                    write(frameBits)
                    continue
                }
                let total = 4 * epsilon + omega * (Self.difference(a, Self.loadTile(centre - 1)) + Self.difference(a, Self.loadTile(centre + 1))
                    + Self.difference(a, Self.loadTile(centre - matteStride)) + Self.difference(a, Self.loadTile(centre + matteStride)))
                // α = 1 pins F = I and α = 0 pins B = I: their smoothness drops out.
                var foregroundTotal = total, backgroundTotal = total
                foregroundTotal.replace(with: TileLanes.zero, where: a .== one)
                backgroundTotal.replace(with: TileLanes.zero, where: a .== TileLanes.zero)
                let inverse = one - a
                let a11 = a * a + foregroundTotal, a22 = inverse * inverse + backgroundTotal, a12 = a * inverse
                let reciprocal = one / (a11 * a22 - a12 * a12)
                let p22 = a22 * reciprocal, p12 = a12 * reciprocal
                @inline(__always) func foreground(_ c: Int) -> TileLanes {
                    let image: TileLanes = Self.float((frameBits &>> Int32(8 * c)) & 0xFF)
                    let startForeground = Self.loadTile(upperRow + c * size + u) * upperWeight
                        + Self.loadTile(lowerRow + c * size + u) * lowerWeight
                    let startBackground = Self.loadTile(upperRow + (3 + c) * size + u) * upperWeight
                        + Self.loadTile(lowerRow + (3 + c) * size + u) * lowerWeight
                    let b1 = a * image + foregroundTotal * startForeground, b2 = inverse * image + backgroundTotal * startBackground
                    return Self.clampColour(p22 * b1 - p12 * b2)
                }
                // Rounded to bytes through their bits, packed as BGRA with the frame's alpha byte, and
                // written where the matte is soft.
                let packed = Self.byte(foreground(0)) | Self.byte(foreground(1)) &<< 8 | Self.byte(foreground(2)) &<< 16
                    | frameBits & TileBits(repeating: Int32(bitPattern: 0xFF00_0000))
                write(frameBits.replacing(with: packed, where: (a .> TileLanes.zero) .& (a .< one)))
            }
        }
    }

    /// Values in [0, 255] rounded to integers, through the bits of 2²³ + value.
    @inline(__always) private static func byte<V: SIMD>(_ value: V) -> V.MaskStorage where V.Scalar == Float {
        unsafeBitCast(value + V(repeating: 8_388_608), to: V.MaskStorage.self) & V.MaskStorage(repeating: 0xFF)
    }

    /// Integers in [0, 2²³) as floats, through their bits.
    @inline(__always) private static func float<V: SIMD>(_ value: V.MaskStorage) -> V where V.Scalar == Float {
        unsafeBitCast(value | V.MaskStorage(repeating: 0x4B00_0000), to: V.self) - V(repeating: 8_388_608)
    }

    /// α of a sum of four matte bytes (of one byte: at 4 × it), divided exactly so that 255 gives
    /// exactly 1 (the pins).
    private let alphaOfSum: UnsafeMutablePointer<Float> = {
        let table = UnsafeMutablePointer<Float>.allocate(capacity: 1021)
        for sum in 0...1020 { table[sum] = Float(sum) / 1020 }
        return table
    }()

    // MARK: - The relaxation sweep

    /// Four lanes: the baseline x86-64 target has 16 SSE registers, and eight-lane vectors spill. (The
    /// sweeps stay at four in every build: how far a step writes past a segment's end is part of
    /// their result.)
    typealias Lanes = SIMD4<Float>
    static let lanes = 4
    /// The tiles' lanes: one register of the build's width (a tile's 32 columns are whole groups).
    /// (Eight in the AVX-512 build too: its code is tuned for 256-bit vectors, as LLVM tunes these CPUs,
    /// and sixteen lanes then take two registers each and spill: 1.9× slower, measured.)
#if PIXEL_AVX2 || PIXEL_AVX512
    typealias TileLanes = SIMD8<Float>
    typealias TileWords = SIMD4<UInt64>
#else
    typealias TileLanes = SIMD4<Float>
    typealias TileWords = SIMD2<UInt64>
#endif
    /// The frame's BGRA pixels of a group, and the lanes' bits.
    typealias TileBits = TileLanes.MaskStorage

    /// One Jacobi step for the pixels `columns` of row `y` of `planes`: reads solution `source`, writes
    /// the other. Columns run in steps of `lanes` past the range's end (the planes' strides leave room,
    /// and what is written there lies outside what later sweeps read).
    @inline(__always)
    static func relax(_ planes: PlaneSet, from source: Int, row y: Int, columns: Range<Int>,
                      weights: (regularization: Float, gradient: Float)) {
        let target = 1 - source, stride = planes.stride
        let row = y &* stride
        let alpha = planes.alpha + row
        let epsilon = Lanes(repeating: weights.regularization), omega = Lanes(repeating: weights.gradient)
        let one = Lanes(repeating: 1)
        let channels = (0..<3).lazy.map { c in
            (image: planes.image(c) + row, foreground: planes.foreground(source, c) + row,
             background: planes.background(source, c) + row,
             newForeground: planes.foreground(target, c) + row, newBackground: planes.background(target, c) + row)
        }
        let blue = channels[0], green = channels[1], red = channels[2]
        var x = columns.lowerBound
        while x < columns.upperBound {
            let i = x
            x &+= lanes
            let a = load(alpha + i)
            let left = epsilon + omega * difference(a, load(alpha + i - 1))
            let right = epsilon + omega * difference(a, load(alpha + i + 1))
            let up = epsilon + omega * difference(a, load(alpha + i - stride))
            let down = epsilon + omega * difference(a, load(alpha + i + stride))
            // The pins: where α = 1 the data term alone gives F = I (F's smoothness weights drop to 0),
            // where α = 0 it gives B = I. Scaling the weights costs less than blending the answers.
            var keepForeground = one, keepBackground = one
            keepForeground.replace(with: Lanes.zero, where: a .== one)
            keepBackground.replace(with: Lanes.zero, where: a .== Lanes.zero)
            let foregroundLeft = left * keepForeground, foregroundRight = right * keepForeground
            let foregroundUp = up * keepForeground, foregroundDown = down * keepForeground
            let backgroundLeft = left * keepBackground, backgroundRight = right * keepBackground
            let backgroundUp = up * keepBackground, backgroundDown = down * keepBackground
            let total = left + right + up + down
            let inverse = one - a
            let a11 = a * a + total * keepForeground, a22 = inverse * inverse + total * keepBackground
            let a12 = a * inverse
            // The 2×2 inverse, its determinant folded in once for the three channels.
            let reciprocal = one / (a11 * a22 - a12 * a12)
            let p11 = a11 * reciprocal, p22 = a22 * reciprocal, p12 = a12 * reciprocal
            @inline(__always)
            func solve(_ channel: (image: UnsafeMutablePointer<Float>, foreground: UnsafeMutablePointer<Float>,
                                   background: UnsafeMutablePointer<Float>, newForeground: UnsafeMutablePointer<Float>,
                                   newBackground: UnsafeMutablePointer<Float>)) {
                let image = load(channel.image + i)
                let f = channel.foreground + i, b = channel.background + i
                let neighbourForeground = foregroundLeft * load(f - 1) + foregroundRight * load(f + 1)
                    + foregroundUp * load(f - stride) + foregroundDown * load(f + stride)
                let neighbourBackground = backgroundLeft * load(b - 1) + backgroundRight * load(b + 1)
                    + backgroundUp * load(b - stride) + backgroundDown * load(b + stride)
                let foregroundPart = a * image
                let b1 = foregroundPart + neighbourForeground, b2 = image - foregroundPart + neighbourBackground
                store(clampColour(p22 * b1 - p12 * b2), channel.newForeground + i)
                store(clampColour(p11 * b2 - p12 * b1), channel.newBackground + i)
            }
            solve(blue)
            solve(green)
            solve(red)
        }
    }

    // The helpers serve every lane count (`Lanes`, `TileLanes`): each lane computes alone, so a wider
    // vector gives the same bytes.
    @inline(__always) static func load(_ pointer: UnsafeMutablePointer<Float>) -> Lanes {
        UnsafeRawPointer(pointer).loadUnaligned(as: Lanes.self)
    }

    @inline(__always) static func store(_ value: Lanes, _ pointer: UnsafeMutablePointer<Float>) {
        UnsafeMutableRawPointer(pointer).storeBytes(of: value, as: Lanes.self)
    }

    @inline(__always) static func loadTile(_ pointer: UnsafeMutablePointer<Float>) -> TileLanes {
        UnsafeRawPointer(pointer).loadUnaligned(as: TileLanes.self)
    }

    /// |a − b| by clearing the sign bit (the generic pointwiseMax is not inlined).
    @inline(__always) static func difference<V: SIMD>(_ a: V, _ b: V) -> V where V.Scalar == Float {
        let bits = unsafeBitCast(a - b, to: V.MaskStorage.self) & V.MaskStorage(repeating: 0x7FFF_FFFF)
        return unsafeBitCast(bits, to: V.self)
    }

    /// The value clamped to [0, 255], in the operand order of SSE's maxps/minps (which LLVM then uses).
    @inline(__always) static func clampColour(_ value: Lanes) -> Lanes {
        var low = Lanes.zero
        low.replace(with: value, where: value .> Lanes.zero)
        var high = Lanes(repeating: 255)
        high.replace(with: low, where: low .< high)
        return high
    }

#if PIXEL_AVX2 || PIXEL_AVX512
    /// The same for the tiles' eight lanes, half by half (not generic: a generic SIMD comparison is
    /// compiled lane by lane, with a branch each).
    @inline(__always) static func clampColour(_ value: TileLanes) -> TileLanes {
        TileLanes(lowHalf: clampColour(value.lowHalf), highHalf: clampColour(value.highHalf))
    }
#endif
}

/// Sixteen float planes with one stride: the image (3, B G R), the matte, and two solutions (for
/// Jacobi: one read, one written), each foreground (3) then background (3).
struct PlaneSet {
    let base: UnsafeMutablePointer<Float>
    let stride: Int
    let planeSize: Int
    static let planeCount = 16

    /// Zeroed planes of `rows` rows; the caller deallocates `base`.
    static func allocate(stride: Int, rows: Int) -> PlaneSet {
        let base = UnsafeMutablePointer<Float>.allocate(capacity: planeCount * stride * rows)
        base.initialize(repeating: 0, count: planeCount * stride * rows)
        return PlaneSet(base: base, stride: stride, planeSize: stride * rows)
    }

    func image(_ channel: Int) -> UnsafeMutablePointer<Float> { base + channel * planeSize }
    /// The six planes of a solution (foreground B G R, background B G R): consecutive.
    func solutionPlanes(_ solution: Int) -> SolutionPlanes { SolutionPlanes(first: foreground(solution, 0), planeSize: planeSize) }
    var alpha: UnsafeMutablePointer<Float> { base + 3 * planeSize }
    func foreground(_ solution: Int, _ channel: Int) -> UnsafeMutablePointer<Float> {
        base + (4 + 6 * solution + channel) * planeSize
    }
    func background(_ solution: Int, _ channel: Int) -> UnsafeMutablePointer<Float> {
        base + (7 + 6 * solution + channel) * planeSize
    }
}

/// Part of a row of a level: where a sweep works.
struct Segment {
    let y: Int
    let columns: Range<Int>
}

/// Six consecutive planes of one solution, by index.
struct SolutionPlanes {
    let first: UnsafeMutablePointer<Float>
    let planeSize: Int
    subscript(_ plane: Int) -> UnsafeMutablePointer<Float> { first + plane * planeSize }
}

/// A whole pyramid level, with a one-pixel border that repeats its edge (the neighbours there weigh
/// ε and hold the edge's own values), and room on the right for steps of 4 and 8 past a row's end.
final class StoredLevel {
    let width: Int, height: Int
    let planes: PlaneSet
    /// Which solution holds the latest answer.
    var solution = 0
    var solutionPlanes: Range<Int> { (4 + 6 * solution)..<(10 + 6 * solution) }

    /// Every row, whole.
    let wholeRows: [Segment]

    init(width: Int, height: Int) {
        self.width = width
        self.height = height
        planes = PlaneSet.allocate(stride: (width + 7) / 8 * 8 + 8, rows: height + 2)
        wholeRows = (0..<height).map { Segment(y: $0, columns: 0..<width) }
    }

    deinit { planes.base.deallocate() }

    /// Offset of level pixel (x, y).
    @inline(__always) func index(_ x: Int, _ y: Int) -> Int { (y + 1) * planes.stride + x + 1 }

    /// Copies the edge into the border of planes `range`.
    func refreshBorder(planes range: Range<Int>) {
        let stride = planes.stride
        for plane in range {
            let p = planes.base + plane * planes.planeSize
            for y in 1...height {
                p[y * stride] = p[y * stride + 1]
                p[y * stride + width + 1] = p[y * stride + width]
            }
            (p).update(from: p + stride, count: width + 2)
            (p + (height + 1) * stride).update(from: p + height * stride, count: width + 2)
        }
    }

    /// Image and matte as 2×2 box averages of the next larger level (edges clamped).
    func average(_ larger: StoredLevel) {
        for plane in 0..<4 {
            let source = larger.planes.base + plane * larger.planes.planeSize
            let target = planes.base + plane * planes.planeSize
            for y in 0..<height {
                let top = source + larger.index(0, 2 * y), bottom = source + larger.index(0, min(2 * y + 1, larger.height - 1))
                let out = target + index(0, y)
                for x in 0..<width {
                    let left = 2 * x, right = min(2 * x + 1, larger.width - 1)
                    out[x] = (top[left] + top[right] + bottom[left] + bottom[right]) * 0.25
                }
            }
        }
        refreshBorder(planes: 0..<4)
    }

    /// The coarsest level starts with F = B = its image.
    func startFromImage() {
        solution = 0
        for c in 0..<3 {
            planes.foreground(0, c).update(from: planes.image(c), count: planes.planeSize)
            planes.background(0, c).update(from: planes.image(c), count: planes.planeSize)
        }
    }

    /// Starts from the next smaller level's answer (each of its pixels covering 2×2 here) on
    /// `segments` (which start at even columns). Only the first solution: a sweep writes the second
    /// wherever the next one reads it.
    func startFrom(_ smaller: StoredLevel, segments: [Segment]) {
        solution = 0
        let sources = smaller.planes.solutionPlanes(smaller.solution), targets = planes.solutionPlanes(0)
        for plane in 0..<6 {
            for segment in segments {
                let from = sources[plane] + smaller.index(0, segment.y >> 1)
                let to = targets[plane] + index(0, segment.y)
                // Eight at a time, past the segment's end (into the row's padding and border, or
                // pixels that get the same values anyway).
                var x = segment.columns.lowerBound
                while x < segment.columns.upperBound {
                    let four = UnsafeRawPointer(from + (x >> 1)).loadUnaligned(as: SIMD4<Float>.self)
                    UnsafeMutableRawPointer(to + x).storeBytes(of: SIMD4(four[0], four[0], four[1], four[1]), as: SIMD4<Float>.self)
                    UnsafeMutableRawPointer(to + x + 4).storeBytes(of: SIMD4(four[2], four[2], four[3], four[3]), as: SIMD4<Float>.self)
                    x += 8
                }
            }
        }
        refreshBorder(planes: solutionPlanes)
    }
}

/// One slice's scratch for `finishTile`: the quarter level's answer upsampled along its rows, and the matte.
final class TileScratch {
    /// (tileSize / 4 + 2) quarter rows × 6 planes × tileSize columns.
    let rows: UnsafeMutablePointer<Float>
    let gathered: UnsafeMutablePointer<Float>
    /// (tileSize + 2)² matte values.
    let mattes: UnsafeMutablePointer<Float>

    init(tileSize: Int) {
        rows = .allocate(capacity: (tileSize / 4 + 2) * 6 * tileSize)
        gathered = .allocate(capacity: tileSize / 4 + 8)
        gathered.initialize(repeating: 0, count: tileSize / 4 + 8)
        mattes = .allocate(capacity: (tileSize + 2) * (tileSize + 2) + 4)
        mattes.initialize(repeating: 0, count: (tileSize + 2) * (tileSize + 2) + 4)
    }

    deinit {
        rows.deallocate()
        gathered.deallocate()
        mattes.deallocate()
    }
}
