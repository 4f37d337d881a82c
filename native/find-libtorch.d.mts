export interface FoundLibtorch {
  source: string;
  includeDirs: string[];
  libDir: string;
  abi: number;
  cuda: boolean;
  version: string;
}
export function findLibtorch(): FoundLibtorch;
export function linkLibraries(lt: FoundLibtorch): string[];
export function findCudaInclude(lt: FoundLibtorch): string | undefined;
