/**
 * The dashboard's entry: renders the app into #app. Everything it shows comes from the
 * controller's JSON API on the same origin.
 */
import { render } from 'preact';
import { App } from './app.js';
import './style.css';

render(<App />, document.getElementById('app') as HTMLElement);
