/** The few members of autocannon (no types of its own) that bench/fenced-http.ts uses. */
declare module 'autocannon' {
  export interface AutocannonRequest {
    method?: string;
    path?: string;
    headers?: Record<string, string>;
    body?: string;
  }
  export interface AutocannonOptions {
    url: string;
    connections?: number;
    duration?: number;
    method?: string;
    headers?: Record<string, string>;
    body?: string;
    requests?: { method?: string; setupRequest?: (req: AutocannonRequest) => AutocannonRequest }[];
  }
  export interface AutocannonHistogram {
    average: number;
    p50: number;
    p99: number;
  }
  export interface AutocannonResult {
    requests: AutocannonHistogram & { total: number };
    latency: AutocannonHistogram;
    non2xx: number;
    errors: number;
    timeouts: number;
    duration: number;
  }
  function autocannon(options: AutocannonOptions): Promise<AutocannonResult>;
  export default autocannon;
}
